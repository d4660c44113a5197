package peers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/byorelay/byorelay/internal/lambdafn"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/apiserver"
	"github.com/byorelay/byorelay/store/dynamo"
)

// VerificationURL is the approval page the local stacks name in a pairing
// code. Nothing serves it: tests approve through the admin API, as the
// page would. Without one, the relay refuses the device-code flow (501).
const VerificationURL = "http://127.0.0.1/byorelay/approve"

// Byorelay is byorelay's whole local stack for one test: every function of
// template.yaml behind the local API server, over a fresh table in
// DynamoDB Local. Origin serves the daemon plane, the site plane and the
// admin API (/admin), exactly as API Gateway would route them.
type Byorelay struct {
	Origin string
	Stack  *lambdafn.Stack
}

// StartByorelay starts the local stack on loopback until the test ends.
func StartByorelay(t testing.TB) *Byorelay {
	t.Helper()
	return StartByorelayEnv(t, lambdafn.Env{})
}

// StartByorelayEnv is StartByorelay with the functions' table settings
// (SiteCopies, UnsealedShards, FinishedShards, DueShards) taken from env;
// the rest of env is the local stack's.
func StartByorelayEnv(t testing.TB, env lambdafn.Env) *Byorelay {
	t.Helper()
	st := OpenStack(t, lambdafn.Env{VerificationURL: VerificationURL, MetricsNamespace: "byorelay",
		SiteCopies: env.SiteCopies, UnsealedShards: env.UnsealedShards, FinishedShards: env.FinishedShards, DueShards: env.DueShards})
	srv, err := apiserver.ForStack(st, apiserver.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return &Byorelay{Origin: ts.URL, Stack: st}
}

// StartByorelayWith serves a relay built by build over the stack's own
// store and projection, with the stack's admin API beside it, on loopback:
// for a relay configured beyond what the functions' environment can say
// (a control plane that authors grants). It is the relay package served
// straight over HTTP, not through the API server.
func StartByorelayWith(t testing.TB, build func(relay.Config) (*relay.Relay, error)) *Byorelay {
	t.Helper()
	st := OpenStack(t, lambdafn.Env{VerificationURL: VerificationURL, MetricsNamespace: "byorelay"})
	rl, err := build(relay.Config{
		Store:           st.Store,
		Pairing:         st.Store,
		VerificationURL: VerificationURL,
		Projection:      st.Control,
		Logger:          slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/", st.Admin())
	mux.Handle("/", rl.HTTPHandler())
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return &Byorelay{Origin: ts.URL, Stack: st}
}

// OpenStack opens the functions' shared wiring over a fresh table in
// DynamoDB Local (env.TableName is replaced), quiet: the relay's decision
// log and metrics would drown a failing test's output.
func OpenStack(t testing.TB, env lambdafn.Env) *lambdafn.Stack {
	t.Helper()
	ctx := context.Background()
	cfg := localtest.AWSConfig(localtest.DynamoEndpoint(t))
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	env.TableName = "stack-" + hex.EncodeToString(b[:])
	if err := dynamo.CreateTable(ctx, dynamodb.NewFromConfig(cfg), env.TableName); err != nil {
		t.Fatal(err)
	}
	st, err := lambdafn.Open(env, lambdafn.Options{AWS: &cfg, Logger: slog.New(slog.DiscardHandler), MetricsOut: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	// Callers serve st.Relay(ctx) and st.Store directly, not through the
	// handlers that wait for the store clock's first reading.
	st.Calibrate(ctx)
	return st
}
