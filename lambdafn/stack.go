package lambdafn

import (
	"context"
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
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/byorelay/byorelay/controlplane"
	"github.com/byorelay/byorelay/controlplane/grants"
	"github.com/byorelay/byorelay/lambdafn/container"
	"github.com/byorelay/byorelay/lambdafn/paramstore"
	"github.com/byorelay/byorelay/relay"
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
	// the relay and, for the store, a dynamo.ServerClock over the host
	// clock: every replica's leases and windows read DynamoDB's clock.
	Clock store.Clock
	// Logger receives the relay's decision records; nil writes JSON to
	// stderr, which Lambda ships to CloudWatch Logs.
	Logger *slog.Logger
	// MetricsOut receives EMF records; nil is stdout, where Lambda's log
	// agent picks EMF up. io.Discard turns metrics off.
	MetricsOut io.Writer
	// Grants authors grants with a key the caller holds (the local stack's);
	// nil reads one from Env.GrantKeyParameter when that is set.
	Grants *grants.Author
}

// Stack is one container's wiring, shared by every function it serves:
// clients, the routing store, the projection, the relay, the admin API.
// Build one per process (a Lambda container, or the local server for all
// functions at once); it holds no routing state of its own, so any number
// of Stacks over one table are replicas.
type Stack struct {
	Env     Env
	Relay   *relay.Relay
	Store   *dynamo.Store
	Control *controlplane.Store
	Metrics *EMF

	log   *slog.Logger
	waker *Waker
	churn *ChurnPublisher
	admin func() http.Handler

	// serverClock is the store's clock unless Options.Clock replaced it;
	// its offset is published at most once a minute (noteClock).
	serverClock *dynamo.ServerClock
	clockMu     sync.Mutex
	clockNoted  time.Time
	// calibrateMu serialises the calibrating read Calibrate makes while
	// the clock has none.
	calibrateMu sync.Mutex
}

// Open builds a Stack from env.
func Open(ctx context.Context, env Env, opts Options) (*Stack, error) {
	cfg, endpoint, err := awsConfig(opts.AWS)
	if err != nil {
		return nil, err
	}
	st := &Stack{}
	clock, storeClock := opts.Clock, opts.Clock
	if clock == nil {
		clock = store.SystemClock{}
		// One time source for every replica's expiry decisions: the host
		// clock corrected by the Date of DynamoDB's own responses
		// (docs/architecture.md, "One time source"). The relay's clock stays
		// the host's: signature freshness is about the caller's clock
		// versus this process's.
		st.serverClock = dynamo.NewServerClock(nil)
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
	st.Metrics = NewEMF(out, env.MetricsNamespace, os.Getenv("AWS_LAMBDA_FUNCTION_NAME"), clock)

	if env.ChurnTopicARN != "" {
		st.churn = NewChurnPublisher(cfg, aws.ToString(endpoint("sns", nil)), env.ChurnTopicARN, log)
	}
	if env.WakeupGroup != "" {
		st.waker = NewWaker(cfg, aws.ToString(endpoint("scheduler", nil)), env.WakeupGroup, env.SweeperARN, env.WakeupRoleARN, storeClock)
	}

	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = endpoint("dynamodb", o.BaseEndpoint) })
	dcfg := dynamo.Config{
		DB:    db,
		Table: env.TableName,
		Options: store.Options{
			Clock:             storeClock,
			OnChurn:           st.onChurn(),
			AwaitingPayloadMs: env.AwaitingPayloadMs,
		},
	}
	if env.BucketName != "" {
		dcfg.S3 = lazyS3{client: sync.OnceValue(func() *s3.Client {
			return s3.NewFromConfig(cfg, func(o *s3.Options) {
				o.UsePathStyle = env.S3PathStyle
				o.BaseEndpoint = endpoint("s3", o.BaseEndpoint)
			})
		})}
		dcfg.Bucket = env.BucketName
	}
	st.Store, err = dynamo.New(dcfg)
	if err != nil {
		return nil, err
	}
	// The projection lives in the same table: one more table would be one
	// more thing a deployment can get half right.
	st.Control = controlplane.NewStore(controlplane.NewDynamoStorage(db, env.TableName))
	var params *paramstore.Client
	if env.GrantKeyParameter != "" || env.OriginSecretParameter != "" {
		params = paramstore.New(cfg, aws.ToString(endpoint("ssm", nil)))
		// This container waits on SSM before it asks for work: read
		// DynamoDB's clock meanwhile, in that wait, so the first request
		// need not (it waits on Calibrate's lock if the read is still out).
		go st.Calibrate(context.WithoutCancel(ctx))
	}
	author, err := grantAuthor(ctx, params, env, opts, clock)
	if err != nil {
		return nil, err
	}
	rcfg := relay.Config{
		Store:           st.Store,
		Pairing:         st.Store,
		VerificationURL: env.VerificationURL,
		Projection:      st.Control,
		Clock:           clock,
		LeaseMs:         env.LeaseMs,
		BasePath:        env.BasePath,
		Debug:           env.Debug,
		UpdateOffer:     env.UpdateOffer,
		DaemonFloor:     env.DaemonFloor,
		Logger:          log,
		Metrics:         st.Metrics,
	}
	if env.OriginSecretParameter != "" {
		lock, err := NewSSMOriginSecrets(ctx, params, env.OriginSecretParameter, clock, log)
		if err != nil {
			return nil, err
		}
		rcfg.OriginSecrets = lock.Secrets
	}
	if author != nil {
		// Key and author from one object: a relay handing devices one key
		// and signing with another would have every job refused at the
		// device while reporting itself healthy.
		rcfg.ControlPlanePublic = author.Public()
		rcfg.AuthorGrant = author.Grant
	}
	if st.Relay, err = relay.New(rcfg); err != nil {
		return nil, err
	}
	st.admin = sync.OnceValue(func() http.Handler {
		return controlplane.AdminHandler(controlplane.NewAdmin(controlplane.AdminConfig{
			Store:    st.Control,
			Pairings: st.Store,
			Clock:    clock,
			Logger:   log,
		}))
	})
	return st, nil
}

// Admin is the control API's handler, built on first use: its router is
// a fifth of a relay function's Open, and only the admin function (and
// `byorelay serve`) serves it.
func (st *Stack) Admin() http.Handler { return st.admin() }

// lazyS3 is the envelope bucket's client, built by the first envelope too
// large to inline: most containers never offload one, and building the
// client at Open was init work at every cold start of every function.
type lazyS3 struct{ client func() *s3.Client }

func (l lazyS3) PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	return l.client().PutObject(ctx, in, opts...)
}

func (l lazyS3) GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error) {
	return l.client().GetObject(ctx, in, opts...)
}

func (l lazyS3) DeleteObject(ctx context.Context, in *s3.DeleteObjectInput, opts ...func(*s3.Options)) (*s3.DeleteObjectOutput, error) {
	return l.client().DeleteObject(ctx, in, opts...)
}

// grantAuthor is the injected author, or one over the seed in the SSM
// parameter the environment names, or nil (direct mode). Read once, at
// start: a claim must not wait on SSM, and a container that cannot read
// its key must fail to start rather than pair devices without one.
func grantAuthor(ctx context.Context, params *paramstore.Client, env Env, opts Options, clock store.Clock) (*grants.Author, error) {
	if opts.Grants != nil {
		return opts.Grants, nil
	}
	if env.GrantKeyParameter == "" {
		return nil, nil
	}
	found, err := params.Get(ctx, env.GrantKeyParameter)
	if err != nil {
		return nil, fmt.Errorf("lambdafn: read grant key: %w", err)
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("lambdafn: grant key parameter %s does not exist", env.GrantKeyParameter)
	}
	seed, err := grants.SeedFromParameter(found[0].Name, found[0].Type, found[0].Value)
	if err != nil {
		return nil, fmt.Errorf("lambdafn: %w", err)
	}
	return grants.New(seed, grants.Options{Clock: clock})
}

// awsConfig is the given configuration, or the environment's; endpoint
// answers a service's endpoint override: the environment's
// AWS_ENDPOINT_URL_<SERVICE> when the configuration came from there, else
// what the client already had.
func awsConfig(given *aws.Config) (cfg aws.Config, endpoint func(service string, had *string) *string, err error) {
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
	case name == Claim:
		return st.claimHandler, nil
	default:
		return st.relayHandler, nil
	}
}

// AttachHandler is the stream attach function's handler, for lambdaurl:
// the relay's attach alone, as Server-Sent Events when the caller accepts
// them and as the long-poll otherwise; every other path answers 404
// (relay.AttachHandler).
func (st *Stack) AttachHandler() http.Handler {
	h := st.Relay.AttachHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st.Calibrate(r.Context())
		h.ServeHTTP(w, r)
		st.noteClock()
	})
}

func (st *Stack) relayHandler(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	resp, err := st.serve(ctx, ev)
	if err != nil {
		return badEvent(), nil
	}
	return container.ToAPIGateway(resp), nil
}

func (st *Stack) serve(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (relay.Response, error) {
	st.Calibrate(ctx)
	req, err := container.FromAPIGateway(ev)
	if err != nil {
		st.log.WarnContext(ctx, "undecodable event", slog.String("problem", err.Error()))
		return relay.Response{}, err
	}
	if id := ev.RequestContext.RequestID; id != "" {
		ctx = relay.WithRequestID(ctx, id)
	}
	resp := st.Relay.Handle(ctx, req)
	st.noteClock()
	return resp, nil
}

// Calibrate returns once the store clock has read DynamoDB's, or has
// tried: while it has no reading, each call makes one read (half a read
// unit), one at a time. Every handler calls it first, so a cold container
// stamps nothing with its host's skew (docs/architecture.md, "One time
// source"); a failure costs only timeliness: the clock reads the host
// until a store call answers, and the sweep calibrates again before it
// decides any expiry. A caller serving st.Relay or st.Store by another
// path (`byorelay serve`'s stream and admin routes) calls it once before
// serving.
//
// The read is made by the first request, not started at Open: begun in the
// background at init it competed with the rest of the init for the CPU
// (its first SDK call, signing and connection are about 1.4 ms of CPU),
// which lengthened init by about a third of a hello-world's under the
// emulator; the first request waits for one round trip either way. Only a
// container that waits on SSM at Open anyway (the grant key, the origin
// secret) starts it there, to run in that wait.
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
// the relay (a claim among them: /byollm/x/claim dispatches to claim, so it
// may need a wake-up). The page sits outside /byollm and /relay, where the
// reference answers 404, so no protocol path changes meaning.
func (st *Stack) catchAllHandler(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	method := ev.RequestContext.HTTP.Method
	if ev.RawPath == controlplane.ApprovePagePath && (method == http.MethodGet || method == http.MethodHead) {
		req, err := container.FromAPIGateway(ev)
		if err != nil {
			return badEvent(), nil
		}
		// Behind an edge the page is no way around it: a request without
		// the edge's secret goes on to the relay, which refuses it as it
		// refuses every other path.
		if ok, err := st.Relay.PassesOriginLock(ctx, req.Header); err == nil && ok {
			return container.ToAPIGateway(serveHTTP(ctx, approvePage(), req)), nil
		}
	}
	return st.claimHandler(ctx, ev)
}

// approvePage is built once, on first use: it hashes its script for its
// CSP, which no function but the catch-all needs at its cold start.
var approvePage = sync.OnceValue(controlplane.ApprovePage)

// claimHandler is the relay, plus a sweeper wake-up for the grants a claim
// hands out.
func (st *Stack) claimHandler(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	resp, err := st.serve(ctx, ev)
	if err != nil {
		return badEvent(), nil
	}
	if st.waker != nil && resp.Status == http.StatusOK {
		if at, ok := earliestClaimDeadline(resp.Body); ok {
			// A failed wake-up costs timeliness, not correctness: the
			// periodic schedule and every later claim sweep too. So it is
			// logged, and the device still gets its jobs.
			if err := st.waker.Wake(ctx, at); err != nil {
				st.log.WarnContext(ctx, "sweeper wake-up not scheduled", slog.String("problem", err.Error()))
			}
		}
	}
	return container.ToAPIGateway(resp), nil
}

// badEvent answers an event API Gateway could not have produced (a base64
// body that does not decode) the way the relay answers a body it cannot
// read.
func badEvent() events.APIGatewayV2HTTPResponse {
	return events.APIGatewayV2HTTPResponse{
		StatusCode: http.StatusBadRequest,
		Headers:    map[string]string{"content-type": "application/json"},
		Body:       `{"error":"bad-request"}`,
	}
}
