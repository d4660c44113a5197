package apiserver_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/lambdafn"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/apiserver"
	"github.com/byorelay/byorelay/localtest/peers"
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
	// The listener comes first so the relay can be told its own URL:
	// device-code pairing answers 501 without a verification URL.
	ts := httptest.NewUnstartedServer(nil)
	url := "http://" + ts.Listener.Addr().String()
	st := peers.OpenStack(t, lambdafn.Env{MetricsNamespace: "byorelay", VerificationURL: url + "/admin/pairings"})
	srv, err := apiserver.ForStack(st, apiserver.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = srv
	ts.Start()
	t.Cleanup(ts.Close)

	demo := relaytest.NewDemo(t)
	admin := controlplane.NewAdmin(controlplane.AdminConfig{Store: st.Control, Pairings: st.Store, Logger: slog.New(slog.DiscardHandler)})
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
