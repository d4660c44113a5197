package apiserver_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/byorelay/byorelay/controlplane"
	"github.com/byorelay/byorelay/lambdafn"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/apiserver"
	"github.com/byorelay/byorelay/relay/relaytest"
	"github.com/byorelay/byorelay/store/dynamo"
)

func TestMain(m *testing.M) { localtest.Main(m) }

// stack is the local stack a test talks to: the API server over a fresh
// table in DynamoDB Local, with the demo world imported through the
// control plane.
type stack struct {
	baseURL string
	demo    relaytest.Demo
	admin   *controlplane.Admin
}

func startStack(t *testing.T) *stack {
	t.Helper()
	ctx := context.Background()
	cfg := localtest.AWSConfig(localtest.DynamoEndpoint(t))
	table := "apiserver-" + randomHex(t)
	if err := dynamo.CreateTable(ctx, dynamodb.NewFromConfig(cfg), table); err != nil {
		t.Fatal(err)
	}
	// The listener comes first so the relay can be told its own URL:
	// device-code pairing answers 501 without a verification URL.
	ts := httptest.NewUnstartedServer(nil)
	url := "http://" + ts.Listener.Addr().String()
	quiet := slog.New(slog.DiscardHandler)
	env := lambdafn.Env{TableName: table, MetricsNamespace: "byorelay", VerificationURL: url + "/admin/pairings"}
	st, err := lambdafn.Open(ctx, env, lambdafn.Options{AWS: &cfg, Logger: quiet, MetricsOut: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := apiserver.ForStack(st, apiserver.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = srv
	ts.Start()
	t.Cleanup(ts.Close)

	demo := relaytest.NewDemo(t)
	admin := controlplane.NewAdmin(controlplane.AdminConfig{Store: st.Control, Pairings: st.Store, Logger: quiet})
	if _, err := admin.Import(ctx, demo.Fixture); err != nil {
		t.Fatal(err)
	}
	return &stack{baseURL: ts.URL, demo: demo, admin: admin}
}

// revokeDevice revokes d through the control plane, as `byorelay admin`
// would.
func (st *stack) revokeDevice(t *testing.T, d *relaytest.Daemon) {
	t.Helper()
	if _, _, err := st.admin.RevokeDevice(context.Background(), d.RunnerID); err != nil {
		t.Fatal(err)
	}
}

func randomHex(t *testing.T) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}
