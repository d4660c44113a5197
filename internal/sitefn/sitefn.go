// Package sitefn is what a deployed site function needs, and nothing a
// developer tool needs: the registry of the site stack's functions
// (site-template.yaml), configuration from the environment, one Stack per
// container, and the API Gateway and scheduler handlers over siteserver.
// functions/site*/main.go call Start and nothing else.
package sitefn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	site "github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/container"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/internal/platform/emf"
	"github.com/byorelay/byorelay/internal/platform/paramstore"
	"github.com/byorelay/byorelay/internal/sitepump"
	"github.com/byorelay/byorelay/internal/siteserver"
	sitedynamo "github.com/byorelay/byorelay/internal/sitestore/dynamo"
	"github.com/byorelay/byorelay/protocol"
)

// Kind is how a function is invoked.
type Kind string

const (
	KindHTTP     Kind = "http"
	KindSchedule Kind = "schedule"
	// KindPump is the cloud lane's pump, invoked asynchronously (by the
	// app after an enqueue, by its own wake-ups and hand-overs).
	KindPump Kind = "pump"
)

// Function is one deployed site function.
type Function struct {
	// Name is the directory under functions/.
	Name string
	// LogicalID is its resource in site-template.yaml.
	LogicalID string
	Kind      Kind
	// Route is the HTTP API route key, "" for the sweeper.
	Route string
}

// Function names: functions/site<endpoint>.
const (
	Pair      = "sitepair"
	Claim     = "siteclaim"
	Heartbeat = "siteheartbeat"
	Fetch     = "sitefetch"
	Result    = "siteresult"
	Release   = "siterelease"
	App       = "siteapp"
	Sweeper   = "sitesweeper"
	Pump      = "sitepump"
)

// Functions lists the site stack: one function per daemon endpoint (POST
// only: the reference answers any other verb 405, and API Gateway's own 404
// for it is no worse), the app API, the sweeper, and the cloud lane's
// pump. site-template.yaml deploys the daemon endpoints on the direct lane
// only and the pump on the cloud lane only (Function.Lane).
func Functions() []Function {
	fns := []Function{}
	for _, ep := range []string{"pair", "claim", "heartbeat", "fetch", "result", "release"} {
		name := "site" + ep
		fns = append(fns, Function{Name: name, LogicalID: logicalID(name), Kind: KindHTTP, Route: "POST /byollm/" + ep})
	}
	fns = append(fns,
		Function{Name: App, LogicalID: logicalID(App), Kind: KindHTTP, Route: "ANY /app/{proxy+}"},
		Function{Name: Sweeper, LogicalID: logicalID(Sweeper), Kind: KindSchedule},
		Function{Name: Pump, LogicalID: logicalID(Pump), Kind: KindPump},
	)
	return fns
}

// ReadsKeys reports whether the function reads the site's keys. An HTTP
// function answers through the site server, which signs with them; the
// sweeper only sweeps the store. site-template.yaml grants the keys'
// parameter to exactly these functions: a role that may read the site's
// private keys without needing them is a leak waiting for a bug.
// The pump seals payloads, so it reads them too.
func (f Function) ReadsKeys() bool { return f.Kind == KindHTTP || f.Kind == KindPump }

// Lane is the lane a function is deployed on: "" for both, else
// siteserver.LaneDirect or LaneCloud.
func (f Function) Lane() string {
	switch {
	case f.Kind == KindPump:
		return siteserver.LaneCloud
	case f.Kind == KindHTTP && f.Name != App:
		return siteserver.LaneDirect
	}
	return ""
}

// logicalID is "Site" + the endpoint, capitalised, + "Function": what the
// Makefile's build-%Function rule lower-cases back to the directory.
func logicalID(name string) string {
	rest := strings.TrimPrefix(name, "site")
	return "Site" + strings.ToUpper(rest[:1]) + rest[1:] + "Function"
}

// Lookup finds a function by name.
func Lookup(name string) (Function, error) {
	for _, f := range Functions() {
		if f.Name == name {
			return f, nil
		}
	}
	return Function{}, fmt.Errorf("sitefn: no function %q", name)
}

// Env is a site function's configuration (set by site-template.yaml).
type Env struct {
	// TableName is the site table (TABLE_NAME), required.
	TableName string
	// SiteKeysParameter names the SSM SecureString holding the site's
	// StoredKeys JSON (SITE_KEYS_PARAMETER). Every function that serves
	// requests reads the same keys: daemons pin one identity.
	SiteKeysParameter string
	// VerificationURL is the page where a user types the code
	// (VERIFICATION_URL), required.
	VerificationURL string
	LeaseMs         int64 // LEASE_MS; 0 is the default
	PairingTTLMs    int64 // PAIRING_TTL_MS; 0 is the default
	// RetentionMs is how long an ended job is kept, from
	// ANSWER_RETENTION_DAYS; 0 is sitestore.DefaultRetentionMs.
	RetentionMs int64
	// BucketName holds at-rest envelopes too large to inline
	// (BUCKET_NAME); "" refuses them (sitestore.ErrTooLarge).
	BucketName string
	// S3PathStyle addresses the bucket by path (S3_PATH_STYLE=1), for
	// local S3 stand-ins whose bucket host names do not resolve.
	S3PathStyle bool

	// The cloud lane: set RelayURL and SiteID (RELAY_URL, RELAY_SITE_ID)
	// and the stack publishes through that relay.
	RelayURL string
	SiteID   string
	// PumpFunction is the pump's function name or ARN, which the app and
	// the pump invoke asynchronously (PUMP_FUNCTION).
	PumpFunction string
	// PumpWakeupGroup, PumpWakeupRoleARN: the Scheduler group the pump's
	// wake-ups go in and the role they invoke it as (PUMP_WAKEUP_GROUP,
	// PUMP_WAKEUP_ROLE_ARN); the target is PumpFunction.
	PumpWakeupGroup   string
	PumpWakeupRoleARN string
	// PumpEveryMs, PumpLeaseMs, PumpBudgetMs (PUMP_EVERY_MS, PUMP_LEASE_MS,
	// PUMP_BUDGET_MS): 0 is sitepump's default.
	PumpEveryMs  int64
	PumpLeaseMs  int64
	PumpBudgetMs int64
	// PumpWakeAfterMs is how far ahead the pump arms its wake-up
	// (PUMP_WAKE_AFTER_MS); deployed, Scheduler rounds it up to a whole
	// minute, so only a local scheduler honours less.
	PumpWakeAfterMs int64
}

// Cloud reports whether the stack is on the cloud lane.
func (e Env) Cloud() bool { return e.RelayURL != "" }

// LoadEnv reads Env through getenv.
func LoadEnv(getenv func(string) string) (Env, error) {
	e := Env{TableName: getenv("TABLE_NAME"), SiteKeysParameter: getenv("SITE_KEYS_PARAMETER"), VerificationURL: getenv("VERIFICATION_URL"),
		BucketName: getenv("BUCKET_NAME"), RelayURL: getenv("RELAY_URL"), SiteID: getenv("RELAY_SITE_ID"),
		PumpFunction: getenv("PUMP_FUNCTION"), PumpWakeupGroup: getenv("PUMP_WAKEUP_GROUP"), PumpWakeupRoleARN: getenv("PUMP_WAKEUP_ROLE_ARN")}
	if (e.RelayURL == "") != (e.SiteID == "") {
		return Env{}, errors.New("sitefn: RELAY_URL and RELAY_SITE_ID are set together (the cloud lane) or not at all (the direct lane)")
	}
	switch v := getenv("S3_PATH_STYLE"); v {
	case "", "0", "false":
	case "1", "true":
		e.S3PathStyle = true
	default:
		return Env{}, fmt.Errorf("sitefn: S3_PATH_STYLE=%q is not 1 or 0", v)
	}
	if e.TableName == "" {
		return Env{}, errors.New("sitefn: TABLE_NAME is required")
	}
	for name, dst := range map[string]*int64{"LEASE_MS": &e.LeaseMs, "PAIRING_TTL_MS": &e.PairingTTLMs,
		"PUMP_EVERY_MS": &e.PumpEveryMs, "PUMP_LEASE_MS": &e.PumpLeaseMs, "PUMP_BUDGET_MS": &e.PumpBudgetMs,
		"PUMP_WAKE_AFTER_MS": &e.PumpWakeAfterMs} {
		if v := getenv(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return Env{}, fmt.Errorf("sitefn: %s=%q is not a positive integer", name, v)
			}
			*dst = n
		}
	}
	if v := getenv("ANSWER_RETENTION_DAYS"); v != "" {
		days, err := strconv.ParseInt(v, 10, 64)
		if err != nil || days <= 0 || days > maxRetentionDays {
			return Env{}, fmt.Errorf("sitefn: ANSWER_RETENTION_DAYS=%q is not a whole number of days from 1 to %d", v, maxRetentionDays)
		}
		e.RetentionMs = days * 24 * 60 * 60_000
	}
	return e, nil
}

// maxRetentionDays is site-template.yaml's bound on AnswerRetentionDays.
const maxRetentionDays = 3650

// Options are what a Stack takes besides Env: in a container they come
// from the AWS SDK; tests and the local stack pass their own.
type Options struct {
	// DB is the DynamoDB client; nil builds one from the environment.
	DB ddb.API
	// Keys are the site's keys; nil reads them from SiteKeysParameter.
	Keys *protocol.Keys
	// Clock is the store's one clock; nil is the host's.
	Clock  clock.Clock
	Logger *slog.Logger
	// Meter counts DynamoDB capacity (the benchmark).
	Meter *ddb.Meter
	// Objects is the envelope bucket; nil builds one from BUCKET_NAME when
	// that is set.
	Objects sitedynamo.Objects
	// Starter and Waker are the cloud lane's pump triggers (an async
	// Lambda invoke, a Scheduler wake-up); nil builds them from the
	// environment.
	Starter sitepump.Starter
	Waker   sitepump.Waker
	// RelayHTTP is the cloud lane's HTTP client; nil is client/site's.
	RelayHTTP *http.Client
}

// Stack is one container's wiring: the DynamoDB store and the server.
type Stack struct {
	Store *sitedynamo.Store
	// server is built at Open when the keys were given, or by the first
	// request that needs it when they are read from SSM; nil in a stack
	// that serves no request (the sweeper's).
	server *container.Deferred[*siteserver.Server]
	log    *slog.Logger
	// starter starts the pump after an enqueue, and pump is the pump;
	// both nil on the direct lane.
	starter sitepump.Starter
	pump    *sitepump.Pump
}

// Open builds a Stack that serves requests. The site's keys, when they are
// read from SSM, are read by the first request rather than here
// (container.Deferred): the round trip was most of a site function's init,
// and a cold container's first request waits for it either way. Nothing
// else in it calls out, so it takes no context.
func Open(env Env, o Options) (*Stack, error) {
	return openStack(env, o, true)
}

// openStack builds a Stack; without serve it is the store alone, which
// needs no keys and reads none (the sweeper's: Function.ReadsKeys).
func openStack(env Env, o Options, serve bool) (*Stack, error) {
	o, cfg, params, err := awsDefaults(env, o, serve)
	if err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	log := o.Logger
	st, err := sitedynamo.New(sitedynamo.Config{DB: o.DB, Table: env.TableName, Clock: o.Clock, Meter: o.Meter,
		RetentionMs: env.RetentionMs, Objects: o.Objects,
		OnObjectDeleteFailed: func(err error) {
			// The bucket's lifecycle rule is the backstop; deletes that keep
			// failing are what the template's alarm on this metric sees.
			log.Warn("envelope object not deleted", slog.String("problem", err.Error()))
			writeCountEMF(os.Stdout, MetricEnvelopeDeleteFailures, nil, time.Now())
		}})
	if err != nil {
		return nil, err
	}
	var cloud *siteserver.CloudLane
	if env.Cloud() {
		cloud = &siteserver.CloudLane{RelayURL: env.RelayURL, SiteID: env.SiteID, HTTPClient: o.RelayHTTP}
	}
	server := func(keys *protocol.Keys) (*siteserver.Server, error) {
		return siteserver.New(siteserver.Config{Store: st, Keys: keys, VerificationURL: env.VerificationURL,
			LeaseMs: env.LeaseMs, PairingTTLMs: env.PairingTTLMs, Logger: o.Logger, Cloud: cloud,
			OnStreamFault: func(f site.StreamFault) { writeStreamFaultEMF(os.Stdout, f, time.Now()) }})
	}
	stack := &Stack{Store: st, log: o.Logger}
	if !serve {
		return stack, nil
	}
	if env.Cloud() {
		if err := stack.openPump(env, o, cfg); err != nil {
			return nil, err
		}
	}
	if params == nil {
		srv, err := server(o.Keys)
		if err != nil {
			return nil, err
		}
		stack.server = container.Built(srv)
		return stack, nil
	}
	stack.server = container.Defer(func(ctx context.Context) (*siteserver.Server, error) {
		keys, err := keysFromSSM(ctx, params, env.SiteKeysParameter)
		if err != nil {
			return nil, err
		}
		return server(keys)
	})
	return stack, nil
}

// errNoServer is Server on a stack opened to sweep: it holds no keys.
var errNoServer = errors.New("sitefn: this stack serves no requests (it was opened to sweep)")

// Server is the container's site server: built at Open, or by the first
// call when the keys are read from SSM (an error then means they could not
// be read, and the caller must not serve without them).
func (st *Stack) Server(ctx context.Context) (*siteserver.Server, error) {
	if st.server == nil {
		return nil, errNoServer
	}
	srv, err := st.server.Get(ctx)
	if err != nil {
		st.log.ErrorContext(ctx, "site server not built", slog.String("problem", err.Error()))
	}
	return srv, err
}

// keysFromSSM reads the site's StoredKeys JSON from a SecureString: a
// parameter stored as plain text would be the site's private keys in the
// clear, so it stops the start like a missing one.
func keysFromSSM(ctx context.Context, params *paramstore.Client, name string) (*protocol.Keys, error) {
	found, err := params.Get(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("sitefn: site keys %s: %w", name, err)
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("sitefn: site keys parameter %s does not exist", name)
	}
	if found[0].Type != paramstore.SecureString {
		return nil, fmt.Errorf("sitefn: site keys parameter %s is a %s, not a SecureString", name, found[0].Type)
	}
	return ParseKeys([]byte(found[0].Value))
}

// ParseKeys reads a StoredKeys JSON document (what @byollm/server's keygen
// writes).
func ParseKeys(raw []byte) (*protocol.Keys, error) {
	var sk protocol.StoredKeys
	if err := json.Unmarshal(raw, &sk); err != nil {
		return nil, fmt.Errorf("sitefn: site keys: %w", err)
	}
	return sk.Keys()
}

// Handler is an API Gateway HTTP API (v2) handler.
type Handler func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// Handler is the named HTTP function's handler. The event becomes a
// request with the body bytes as sent (signatures cover them), and the
// answer an event, by the same translation the relay's functions use.
func (st *Stack) Handler(name string) (Handler, error) {
	f, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	if f.Kind != KindHTTP {
		return nil, fmt.Errorf("sitefn: %s is not an HTTP function", name)
	}
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		srv, err := st.Server(ctx)
		if err != nil {
			return container.Unavailable(), nil
		}
		handle := srv.Handle
		if name == App {
			handle = srv.HandleApp
		}
		req, err := container.FromAPIGateway(ev)
		if err != nil {
			st.log.WarnContext(ctx, "undecodable event", slog.String("problem", err.Error()))
			return container.BadEvent(), nil
		}
		resp := handle(ctx, siteserver.Request{Method: req.Method, Path: req.Path, Header: req.Header, Body: req.Body})
		if name == App && resp.Status == http.StatusOK && strings.HasSuffix(strings.TrimSuffix(req.Path, "/"), "/enqueue") {
			// The job is in the store: a pump publishes it, and seals and
			// collects it, whether or not the enqueue reached the relay.
			st.startPump(ctx)
		}
		return toAPIGateway(resp), nil
	}, nil
}

// toAPIGateway answers a site server response through the platform's
// translation, the one the relay's functions answer by: a body that is not
// UTF-8 goes base64 (as text API Gateway would mangle it) and each
// Set-Cookie goes in the cookie list (comma-joined, an Expires breaks it).
func toAPIGateway(r siteserver.Response) events.APIGatewayV2HTTPResponse {
	return container.ToAPIGateway(container.Response{Status: r.Status, Header: r.Header, Body: r.Body})
}

// SweepReport is the site sweeper's answer: what one sweep ended, so an
// operator invoking it by hand sees that it ran.
type SweepReport struct {
	Expired   int `json:"expired"`
	Unblocked int `json:"unblocked"`
	Failed    int `json:"failed"`
	// BacklogAgeMs is how long the oldest due entry had been due when
	// the sweep began (the MetricSweepBacklogAge metric).
	BacklogAgeMs int64 `json:"backlogAgeMs"`
	// Partial says the sweep stopped at its time budget with work left.
	Partial bool `json:"partial,omitempty"`
}

// Site sweeper metrics, as they appear in CloudWatch and in
// site-template.yaml's alarm, under MetricsNamespace.
const (
	MetricsNamespace      = "byorelay/site"
	MetricSweepBacklogAge = "SweepBacklogAgeMs"
	MetricSweepExpired    = "SweepExpired"
	MetricSweepFailures   = "SweepFailures"
	// MetricEnvelopeDeleteFailures counts the envelope object deletes that
	// failed, from every function (a job ends in any of them).
	MetricEnvelopeDeleteFailures = "EnvelopeDeleteFailures"
)

// sweepReserve is the time a sweep leaves itself before the function's
// deadline to write its metrics and answer.
const sweepReserve = 5 * time.Second

// SweepHandler is the scheduled sweeper: every due shard, one bounded
// worker per shard, page by page (sitedynamo.Store.Sweep). It writes its
// backlog (the oldest due entry's age) and counts as one EMF record on
// stdout, where the alarm in site-template.yaml reads it. A sweep that
// reaches its time budget answers partial, not failed: what it left stays
// in the index for the next run, and the backlog metric shows it. A failed
// item is a failed invocation, which the Scheduler retries.
func (st *Stack) SweepHandler() func(ctx context.Context) (SweepReport, error) {
	return func(ctx context.Context) (SweepReport, error) {
		budget := ctx
		if dl, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			budget, cancel = context.WithDeadline(ctx, dl.Add(-sweepReserve))
			defer cancel()
		}
		stats, err := st.Store.Sweep(budget)
		rep := SweepReport{Expired: stats.Fired, Unblocked: stats.Unblocked, Failed: stats.Failed, BacklogAgeMs: stats.OldestDueAgeMs}
		if budget.Err() != nil && ctx.Err() == nil {
			rep.Partial, rep.Failed, err = true, 0, nil
		}
		writeSweepEMF(os.Stdout, rep, time.Now())
		if err != nil {
			return rep, err
		}
		return rep, nil
	}
}

// writeSweepEMF writes one CloudWatch embedded metric format record of a
// sweep, dimensioned by function.
func writeSweepEMF(out io.Writer, rep SweepReport, now time.Time) {
	writeFunctionEMF(out, Sweeper, now,
		emf.Metric{Name: MetricSweepBacklogAge, Unit: "Milliseconds", Value: float64(rep.BacklogAgeMs)},
		emf.Metric{Name: MetricSweepExpired, Value: float64(rep.Expired)},
		emf.Metric{Name: MetricSweepFailures, Value: float64(rep.Failed)})
}

// writeFunctionEMF writes one EMF record of ms in MetricsNamespace,
// dimensioned by function.
func writeFunctionEMF(out io.Writer, function string, now time.Time, ms ...emf.Metric) {
	_, _ = out.Write(emf.Line(MetricsNamespace, [][]string{{"Function"}}, map[string]any{"Function": function}, now, ms...))
}

// MetricStreamFaults counts stream faults (docs/streaming.md, "Faults
// heard"), one per fault, under MetricsNamespace with the dimension Kind
// (site.FaultKind): site-template.yaml alarms on Kind checkpoint, a
// store that keeps refusing checkpoint writes.
const MetricStreamFaults = "StreamFaults"

// writeStreamFaultEMF writes one CloudWatch embedded metric format record
// of a stream fault. The server logs the fault itself, with its job,
// lease and reason; the record carries the count and the kind only.
func writeStreamFaultEMF(out io.Writer, f site.StreamFault, now time.Time) {
	writeCountEMF(out, MetricStreamFaults, map[string]string{"Kind": string(f.Kind)}, now)
}

// writeCountEMF writes one EMF record counting one event of metric, in
// MetricsNamespace under the given dimensions; none is a sum across the
// site's functions.
func writeCountEMF(out io.Writer, metric string, dims map[string]string, now time.Time) {
	names := slices.Sorted(maps.Keys(dims))
	if names == nil {
		names = []string{}
	}
	props := make(map[string]any, len(dims))
	for k, v := range dims {
		props[k] = v
	}
	_, _ = out.Write(emf.Line(MetricsNamespace, [][]string{names}, props, now, emf.Metric{Name: metric, Value: 1}))
}

// Start runs the named function in a Lambda container (container.Start:
// an error at open is an init failure).
func Start(name string) { container.Start(name, open(name)) }

// open builds the named function's handler from the process environment.
func open(name string) func() (any, error) {
	return func() (any, error) {
		f, err := Lookup(name)
		if err != nil {
			return nil, err
		}
		env, err := LoadEnv(os.Getenv)
		if err != nil {
			return nil, err
		}
		st, err := openStack(env, Options{}, f.ReadsKeys())
		if err != nil {
			return nil, err
		}
		switch f.Kind {
		case KindSchedule:
			return st.SweepHandler(), nil
		case KindPump:
			return st.PumpHandler()
		}
		return st.Handler(name)
	}
}
