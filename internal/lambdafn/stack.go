package lambdafn

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/controlplane/grants"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/container"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/internal/platform/objects"
	"github.com/byorelay/byorelay/internal/platform/paramstore"
	"github.com/byorelay/byorelay/internal/platform/wakeup"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/dynamo"
)

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
	waker        *wakeup.Waker
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
		st.waker = newSweeperWaker(cfg, aws.ToString(endpoint("scheduler", nil)), env.WakeupGroup, env.SweeperARN, env.WakeupRoleARN, storeClock)
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
		UnsealedShards:       env.UnsealedShards,
		FinishedShards:       env.FinishedShards,
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
	projections := controlplane.NewDynamoStorage(db, env.TableName)
	if env.SiteCopies > 0 {
		projections.WithSiteCopies(env.SiteCopies)
	}
	st.Control = controlplane.NewStore(projections)
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
