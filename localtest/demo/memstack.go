package demo

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/controlplane/grants"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/memory"
)

// MemoryStack is the local stack's shape in one handler, for tests of the
// commands that talk to it: the relay over the memory store and the admin
// API on the same origin, behind the local admin guard, with w's
// projection imported. adminToken is the guard's per-run token. Pairing
// codes name verificationURL; nothing serves it. A non-nil author signs
// grants, as `serve --grants` does.
func MemoryStack(ctx context.Context, w *World, verificationURL string, author *grants.Author) (h http.Handler, adminToken string, err error) {
	quiet := slog.New(slog.DiscardHandler)
	mem := memory.New(store.Options{})
	cp := controlplane.NewStore(controlplane.NewMemoryStorage())
	admin := controlplane.NewAdmin(controlplane.AdminConfig{Store: cp, Pairings: mem, Logger: quiet})
	if _, err := admin.Import(ctx, w.Fixture()); err != nil {
		return nil, "", err
	}
	cfg := relay.Config{Store: mem, Pairing: mem, Projection: cp, VerificationURL: verificationURL}
	if author != nil {
		cfg.ControlPlanePublic, cfg.AuthorGrant = author.Public(), author.Grant
	}
	r, err := relay.New(cfg)
	if err != nil {
		return nil, "", err
	}
	mux := http.NewServeMux()
	mux.Handle(controlplane.AdminPrefix+"/", controlplane.AdminHandler(admin))
	mux.Handle("/", r.HTTPHandler())
	if adminToken, err = controlplane.NewAdminToken(); err != nil {
		return nil, "", err
	}
	return controlplane.LocalGuard(controlplane.GuardConfig{Token: adminToken}, mux), adminToken, nil
}
