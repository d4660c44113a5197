package lambdafn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/controlplane/grants"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/container"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/internal/platform/objects"
	"github.com/byorelay/byorelay/internal/platform/paramstore"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/dynamo"
)

// Options are what a caller may inject into Open instead of the defaults a
// Lambda container uses.
type Options struct {
	// AWS is the SDK configuration; nil reads it from the environment
	// Lambda sets (container.AWSFromEnv), with AWS_ENDPOINT_URL_<SERVICE> overrides.
	AWS *aws.Config
	// Clock is the store's and the relay's clock. Nil is the host clock for
	// the relay and, for the store, a ddb.ServerClock over the host
	// clock: every replica's leases and windows read DynamoDB's clock.
	Clock clock.Clock
	// Logger receives the relay's decision records; nil writes JSON to
	// stderr, which Lambda ships to CloudWatch Logs.
	Logger *slog.Logger
	// MetricsOut receives EMF records; nil is stdout, where Lambda's log
	// agent picks EMF up. io.Discard turns metrics off.
	MetricsOut io.Writer
	// RelayMetrics, when set, counts the relay's decisions in place of the
	// EMF records (the local stack counts them into its log); the sweep's
	// and the clock's metrics stay EMF on MetricsOut.
	RelayMetrics relay.Metrics
	// Grants authors grants with a key the caller holds (the local stack's);
	// nil signs with Env.GrantKeyParameter's seed or Env.GrantKMSKeyID's
	// KMS key when one is set.
	Grants *grants.Author
}

// Stack is one container's wiring, shared by every function it serves:
// clients, the routing store, the projection, the relay, the admin API.
// Build one per process (a Lambda container, or the local server for all
// functions at once); it holds no routing state of its own, so any number
// of Stacks over one table are replicas.
type Stack struct {
	Env     Env
	Store   *dynamo.Store
	Control *controlplane.Store
	Metrics *EMF

	// relay is built at Open, or, when the grant key is read from SSM, by
	// the first request that needs it (container.Deferred).
	relay *container.Deferred[*relay.Relay]
	log   *slog.Logger
	// relayMetrics counts the relay's decisions: Metrics unless
	// Options.RelayMetrics replaced it.
	relayMetrics relay.Metrics
	waker        *Waker
	churn        *ChurnPublisher
	admin        func() http.Handler

	// serverClock is the store's clock unless Options.Clock replaced it;
	// its offset is published at most once a minute (noteClock).
	serverClock *ddb.ServerClock
	clockMu     sync.Mutex
	clockNoted  time.Time
	// calibrateMu serialises the calibrating read Calibrate makes while
	// the clock has none.
	calibrateMu sync.Mutex
}

// Open builds a Stack from env. It calls nothing over the network (the
// clients, the grant key and the clock's calibration wait for the first
// request that needs them), so it takes no context: a container's init
// must not wait on a round trip.
func Open(env Env, opts Options) (*Stack, error) {
	cfg, endpoint, err := awsConfig(opts.AWS)
	if err != nil {
		return nil, err
	}
	st := &Stack{}
	clk, storeClock := opts.Clock, opts.Clock
	if clk == nil {
		clk = clock.System{}
		// One time source for every replica's expiry decisions: the host
		// clock corrected by the Date of DynamoDB's own responses
		// (docs/decisions/0012-one-time-source.md). The relay's clock stays
		// the host's: signature freshness is about the caller's clock
		// versus this process's.
		st.serverClock = ddb.NewServerClock(nil)
		storeClock = st.serverClock
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	out := opts.MetricsOut
	if out == nil {
		out = os.Stdout
	}
	if env.MetricsNamespace == "" {
		env.MetricsNamespace = "byorelay" // an Env built in code rather than by LoadEnv
	}
	st.Env, st.log = env, log
	st.Metrics = NewEMF(out, env.MetricsNamespace, os.Getenv("AWS_LAMBDA_FUNCTION_NAME"), clk)
	st.relayMetrics = opts.RelayMetrics
	if st.relayMetrics == nil {
		st.relayMetrics = st.Metrics
	}

	if env.ChurnTopicARN != "" {
		st.churn = NewChurnPublisher(cfg, aws.ToString(endpoint("sns", nil)), env.ChurnTopicARN, log)
	}
	if env.WakeupGroup != "" {
		st.waker = NewWaker(cfg, aws.ToString(endpoint("scheduler", nil)), env.WakeupGroup, env.SweeperARN, env.WakeupRoleARN, storeClock)
	}
	if err := st.openStores(cfg, endpoint, storeClock); err != nil {
		return nil, err
	}
	if err := st.openRelay(cfg, endpoint, clk, opts.Grants); err != nil {
		return nil, err
	}
	st.admin = sync.OnceValue(func() http.Handler {
		return controlplane.AdminHandler(controlplane.NewAdmin(controlplane.AdminConfig{
			Store:    st.Control,
			Pairings: st.Store,
			Presence: st.Store,
			Queue:    st.Store,
			Clock:    clk,
			Logger:   log,
		}))
	})
	return st, nil
}

// openStores opens the routing store and the projection over one table:
// one more table would be one more thing a deployment can get half right.
func (st *Stack) openStores(cfg aws.Config, endpoint endpointFunc, storeClock store.Clock) error {
	env := st.Env
	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = endpoint("dynamodb", o.BaseEndpoint) })
	dcfg := dynamo.Config{
		DB:                   db,
		Table:                env.TableName,
		DueShards:            env.DueShards,
		OnObjectDeleteFailed: st.onObjectDeleteFailed,
		Options: store.Options{
			Clock:             storeClock,
			OnChurn:           st.onChurn(),
			AwaitingPayloadMs: env.AwaitingPayloadMs,
		},
	}
	if env.BucketName != "" {
		dcfg.Objects = objects.New(cfg, aws.ToString(endpoint("s3", nil)), env.BucketName, env.S3PathStyle)
	}
	var err error
	st.Store, err = dynamo.New(dcfg)
	if err != nil {
		return err
	}
	st.Control = controlplane.NewStore(controlplane.NewDynamoStorage(db, env.TableName))
	return nil
}

// openRelay builds the relay over the stores, or defers it to the first
// request when its grant key is read from SSM.
func (st *Stack) openRelay(cfg aws.Config, endpoint endpointFunc, clk clock.Clock, author *grants.Author) error {
	env := st.Env
	var params *paramstore.Client
	if env.GrantKeyParameter != "" || env.OriginSecretParameter != "" {
		params = paramstore.New(cfg, aws.ToString(endpoint("ssm", nil)))
	}
	rcfg := relay.Config{
		Store:           st.Store,
		Pairing:         st.Store,
		VerificationURL: env.VerificationURL,
		Projection:      st.Control,
		Clock:           clk,
		LeaseMs:         env.LeaseMs,
		BasePath:        env.BasePath,
		Debug:           env.Debug,
		UpdateOffer:     env.UpdateOffer,
		DaemonFloor:     env.DaemonFloor,
		Logger:          st.log,
		Metrics:         st.relayMetrics,
		Satisfiable:     Satisfiable(controlplane.NewSlots(st.Control, st.Store)),
	}
	if st.waker != nil {
		rcfg.AwaitingOpened = st.wake
	}
	if env.OriginSecretParameter != "" {
		rcfg.OriginSecrets = NewSSMOriginSecrets(params, env.OriginSecretParameter, clk, st.log).Secrets
	}
	if author == nil && (env.GrantKeyParameter != "" || env.GrantKMSKeyID != "") {
		// Read by the first request, not at init: the round trip to SSM
		// (or KMS) was most of these functions' init, and the first
		// request of a cold container waits for it either way. That
		// request reads DynamoDB's clock meanwhile (Calibrate), so the two
		// round trips overlap.
		st.relay = container.Defer(func(ctx context.Context) (*relay.Relay, error) {
			go st.Calibrate(context.WithoutCancel(ctx))
			author, err := grantAuthor(ctx, cfg, endpoint, params, env, clk)
			if err != nil {
				return nil, err
			}
			return relayWithGrants(rcfg, author)
		})
		return nil
	}
	r, err := relayWithGrants(rcfg, author)
	if err != nil {
		return err
	}
	st.relay = container.Built(r)
	return nil
}

// Admin is the control API's handler, built on first use: its router is
// a fifth of a relay function's Open, and only the admin function (and
// `byorelay serve`) serves it.
func (st *Stack) Admin() http.Handler { return st.admin() }

// relayWithGrants is the relay that hands devices author's key and signs
// their grants with it: key and author from one object, since a relay
// handing devices one key and signing with another would have every job
// refused at the device while reporting itself healthy. A nil author is a
// relay without grants (direct mode).
func relayWithGrants(cfg relay.Config, author *grants.Author) (*relay.Relay, error) {
	if author == nil {
		// No slot is asked about without grants: a daemon in direct mode
		// runs its owner's work on its own default service, so a person's
		// mappings choose nothing and refusing their unmapped jobs would
		// refuse work that runs.
		cfg.Satisfiable = nil
		return relay.New(cfg)
	}
	cfg.ControlPlanePublic = author.Public()
	cfg.AuthorGrant = author.Grant
	return relay.New(cfg)
}

// Satisfiable is the relay's enqueue-time question, answered by the
// control plane's slots over the projection the enqueue read. Only a relay
// with grants asks it (relayWithGrants): mappings decide which service a
// grant names, and without grants nothing names one.
func Satisfiable(slots *controlplane.Slots) relay.Satisfiable {
	return func(ctx context.Context, q relay.SatisfiableQuery) (relay.Verdict, error) {
		v, err := slots.Satisfiable(ctx, q.Projection, q.SiteID, q.Owner, q.Purpose, q.Kind)
		return relay.Verdict(v), err
	}
}

// awsConfig is the given configuration, or the environment's; endpoint
// answers a service's endpoint override: the environment's
// AWS_ENDPOINT_URL_<SERVICE> when the configuration came from there, else
// what the client already had.
func awsConfig(given *aws.Config) (cfg aws.Config, endpoint endpointFunc, err error) {
	if given != nil {
		return *given, func(_ string, had *string) *string { return had }, nil
	}
	cfg, err = container.AWSFromEnv(os.Getenv)
	if err != nil {
		return aws.Config{}, nil, err
	}
	return cfg, func(service string, had *string) *string {
		if ep := container.EndpointFor(os.Getenv, service); ep != nil {
			return ep
		}
		return had
	}, nil
}

// endpointFunc answers a service's endpoint override, given the one its
// client already had (awsConfig).
type endpointFunc func(service string, had *string) *string

// onChurn logs and counts a churn report, then publishes it to SNS when a
// topic is configured.
func (st *Stack) onChurn() func(store.UnsealedChurn) {
	report := relay.ChurnReporter(st.log, st.Metrics)
	return func(c store.UnsealedChurn) {
		report(c)
		if st.churn != nil {
			st.churn.Publish(c)
		}
	}
}

// onObjectDeleteFailed counts an envelope object whose delete failed
// (EnvelopeDeleteFailures) and logs why. The end sweep retries the delete,
// so one failure is a blip; deletes that keep failing leave ciphertext in
// the bucket past its job, and the count is what the template's alarm
// sees.
func (st *Stack) onObjectDeleteFailed(err error) {
	st.Metrics.EnvelopeDeleteFailed()
	st.log.Warn("envelope object not deleted; the end sweep retries it", slog.String("problem", err.Error()))
}

// Handler is the HTTP function name as a Lambda handler. Every relay
// function runs the whole relay router: API Gateway has already picked the
// function by route, and the relay's own dispatch then answers exactly as
// the reference does (a function never answers for a path it was not
// routed, so the extra routes cost nothing).
func (st *Stack) Handler(name string) (Handler, error) {
	f, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	switch {
	case f.Kind != KindHTTP:
		return nil, fmt.Errorf("lambdafn: %s is not an HTTP function", name)
	case name == Admin:
		return st.adminHandler, nil
	case name == CatchAll:
		return st.catchAllHandler, nil
	default:
		return st.relayHandler, nil
	}
}

// Relay is the container's relay: built at Open, or by the first call when
// the grant key is read from SSM (an error then means it could not be
// read, and the caller must not serve without it).
func (st *Stack) Relay(ctx context.Context) (*relay.Relay, error) {
	r, err := st.relay.Get(ctx)
	if err != nil {
		st.log.ErrorContext(ctx, "relay not built", slog.String("problem", err.Error()))
	}
	return r, err
}

// AttachHandler is the stream attach function's handler, for lambdaurl:
// the relay's attach alone, as Server-Sent Events when the caller accepts
// them and as the long-poll otherwise; every other path answers 404
// (relay.AttachHandler).
func (st *Stack) AttachHandler() http.Handler {
	attach := container.Defer(func(ctx context.Context) (http.Handler, error) {
		r, err := st.Relay(ctx)
		if err != nil {
			return nil, err
		}
		return r.AttachHandler(), nil
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, err := attach.Get(r.Context())
		if err != nil {
			writeEvent(w, container.Unavailable())
			return
		}
		st.Calibrate(r.Context())
		h.ServeHTTP(w, r)
		st.noteClock()
	})
}

// writeEvent writes an API Gateway response as plain HTTP.
func writeEvent(w http.ResponseWriter, resp events.APIGatewayV2HTTPResponse) {
	for k, v := range resp.Headers {
		w.Header().Set(k, v)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.WriteString(w, resp.Body)
}

func (st *Stack) relayHandler(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	resp, err := st.serve(ctx, ev)
	if err != nil {
		return failedEvent(err), nil
	}
	return toAPIGateway(resp), nil
}

// errUnavailable is serve's error when the relay could not be built.
var errUnavailable = errors.New("lambdafn: relay unavailable")

// failedEvent answers an event serve could not take: its relay could not
// be built, or the event itself was not one.
func failedEvent(err error) events.APIGatewayV2HTTPResponse {
	if errors.Is(err, errUnavailable) {
		return container.Unavailable()
	}
	return container.BadEvent()
}

// serve answers one event with the relay. The relay comes first: on a cold
// container with a deferred grant key, getting it starts the clock's
// calibrating read before the key's, so the two round trips overlap.
func (st *Stack) serve(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (relay.Response, error) {
	r, err := st.Relay(ctx)
	if err != nil {
		return relay.Response{}, errUnavailable
	}
	st.Calibrate(ctx)
	req, err := fromAPIGateway(ev)
	if err != nil {
		st.log.WarnContext(ctx, "undecodable event", slog.String("problem", err.Error()))
		return relay.Response{}, err
	}
	if id := ev.RequestContext.RequestID; id != "" {
		ctx = relay.WithRequestID(ctx, id)
	}
	resp := r.Handle(ctx, req)
	st.noteClock()
	return resp, nil
}

// Calibrate returns once the store clock has read DynamoDB's, or has
// tried: while it has no reading, each call makes one read (half a read
// unit), one at a time. Every handler calls it first, so a cold container
// stamps nothing with its host's skew
// (docs/decisions/0012-one-time-source.md); a failure costs only timeliness: the clock reads the host
// until a store call answers, and the sweep calibrates again before it
// decides any expiry. A caller serving the relay or st.Store by another
// path (`byorelay serve`'s stream and admin routes) calls it once before
// serving.
//
// The read is made by the first request, not started at Open: begun in the
// background at init it competed with the rest of the init for the CPU
// (its first SDK call, signing and connection are about 1.4 ms of CPU),
// which lengthened init by about a third of a hello-world's under the
// emulator; the first request waits for one round trip either way. A
// container whose first request reads the grant key from SSM starts this
// read just before that one, so the two round trips overlap.
func (st *Stack) Calibrate(ctx context.Context) {
	if st.serverClock == nil {
		return // an injected clock: nothing to learn
	}
	if st.serverClock.Reading().Calibrated {
		return
	}
	st.calibrateMu.Lock()
	defer st.calibrateMu.Unlock()
	if st.serverClock.Reading().Calibrated {
		return
	}
	if err := st.Store.CalibrateClock(ctx); err != nil {
		st.log.WarnContext(ctx, "store clock not calibrated", slog.String("problem", err.Error()))
	}
}

// noteClock publishes the store clock's reading, at most once a minute per
// container: enough for the alarm, and not a metric line per request.
func (st *Stack) noteClock() {
	if st.serverClock == nil {
		return
	}
	now := time.Now() // paces a metric; decides nothing
	st.clockMu.Lock()
	due := st.clockNoted.IsZero() || now.Sub(st.clockNoted) >= time.Minute
	if due {
		st.clockNoted = now
	}
	st.clockMu.Unlock()
	if due {
		st.Metrics.Clock(st.serverClock.Reading())
	}
}

// catchAllHandler serves the verification page, and every other path as
// the relay (a claim among them: /byollm/x/claim dispatches to claim, and
// wakes the sweeper as the claim function's does). The page sits outside /byollm and /relay, where the
// reference answers 404, so no protocol path changes meaning.
func (st *Stack) catchAllHandler(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	method := ev.RequestContext.HTTP.Method
	if ev.RawPath == controlplane.ApprovePagePath && (method == http.MethodGet || method == http.MethodHead) {
		req, err := fromAPIGateway(ev)
		if err != nil {
			return container.BadEvent(), nil
		}
		r, err := st.Relay(ctx)
		if err != nil {
			return container.Unavailable(), nil
		}
		// Behind an edge the page is no way around it: a request without
		// the edge's secret goes on to the relay, which refuses it as it
		// refuses every other path.
		if ok, err := r.PassesOriginLock(ctx, req.Header); err == nil && ok {
			return toAPIGateway(serveHTTP(ctx, approvePage(), req)), nil
		}
	}
	return st.relayHandler(ctx, ev)
}

// approvePage is built once, on first use: it hashes its script for its
// CSP, which no function but the catch-all needs at its cold start.
var approvePage = sync.OnceValue(controlplane.ApprovePage)

// wake schedules the sweeper for when a claim's first awaiting-payload
// window closes (relay.Config.AwaitingOpened). A failed wake-up costs
// timeliness, not correctness: the periodic schedule and every later claim
// sweep too. So it is logged, and the device still gets its jobs.
func (st *Stack) wake(ctx context.Context, untilMs int64) {
	if err := st.waker.Wake(ctx, time.UnixMilli(untilMs)); err != nil {
		st.log.WarnContext(ctx, "sweeper wake-up not scheduled", slog.String("problem", err.Error()))
	}
}
