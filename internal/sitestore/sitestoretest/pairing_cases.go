package sitestoretest

import (
	"errors"
	"testing"

	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

func pairing(e Env, hash, code string) sitestore.Pairing {
	return sitestore.Pairing{DeviceCodeHash: hash, UserCode: code, State: sitestore.PairingPending,
		Label: "laptop", Platform: "linux", DaemonVersion: "0.1.1",
		Capabilities: generate,
		Device:       protocol.PublicIdentity{Identity: "id-" + hash, Encryption: "enc-" + hash, EncryptionSig: "sig"},
		ExpiresAt:    e.now() + 600_000, CreatedAt: e.now()}
}

func (e Env) approve(t *testing.T, code, owner, runner string) (sitestore.Runner, error) {
	t.Helper()
	return e.Store.ApprovePairing(ctx, sitestore.ApproveInput{UserCode: code, Owner: owner, RunnerID: runner})
}

func pairingCases() []testCase {
	return []testCase{
		{"approval creates the runner the user saw and binds it to the approving owner", func(t *testing.T, e Env) {
			p := pairing(e, "h1", "ABCD-EFGH")
			if err := e.Store.CreatePairing(ctx, p); err != nil {
				t.Fatal(err)
			}
			r, err := e.approve(t, "ABCD-EFGH", "alice", "runner_1")
			if err != nil {
				t.Fatal(err)
			}
			if r.ID != "runner_1" || r.Owner != "alice" || r.Device != p.Device || r.Label != "laptop" ||
				len(r.Capabilities) != 1 || r.RevokedAt != 0 || r.LastHeartbeatAt != e.now() {
				t.Fatalf("runner: %+v", r)
			}
			got, found, err := e.Store.PairingByDeviceCodeHash(ctx, "h1")
			if err != nil || !found || got.State != sitestore.PairingApproved || got.Owner != "alice" || got.RunnerID != "runner_1" || got.Collected {
				t.Fatalf("pairing: %+v %v", got, err)
			}
			stored, found, _ := e.Store.Runner(ctx, "runner_1")
			if !found || stored.Owner != "alice" {
				t.Fatalf("stored runner: %+v", stored)
			}
		}},
		{"approval refuses an unknown, an expired and an already-decided code", func(t *testing.T, e Env) {
			if _, err := e.approve(t, "NOPE-NOPE", "alice", "r"); !errors.Is(err, sitestore.ErrPairingUnknown) {
				t.Fatalf("unknown: %v", err)
			}
			e.Store.CreatePairing(ctx, pairing(e, "h1", "AAAA-AAAA"))
			e.advance(600_000)
			if _, err := e.approve(t, "AAAA-AAAA", "alice", "r"); !errors.Is(err, sitestore.ErrPairingExpired) {
				t.Fatalf("expired: %v", err)
			}
			e.Store.CreatePairing(ctx, pairing(e, "h2", "BBBB-BBBB"))
			if _, err := e.approve(t, "BBBB-BBBB", "alice", "r1"); err != nil {
				t.Fatal(err)
			}
			if _, err := e.approve(t, "BBBB-BBBB", "mallory", "r2"); !errors.Is(err, sitestore.ErrPairingNotPending) {
				t.Fatalf("second approval: %v", err)
			}
			e.Store.CreatePairing(ctx, pairing(e, "h3", "CCCC-CCCC"))
			if err := e.Store.DenyPairing(ctx, "CCCC-CCCC"); err != nil {
				t.Fatal(err)
			}
			if _, err := e.approve(t, "CCCC-CCCC", "alice", "r3"); !errors.Is(err, sitestore.ErrPairingNotPending) {
				t.Fatalf("approval after denial: %v", err)
			}
			if p, _, _ := e.Store.PairingByDeviceCodeHash(ctx, "h3"); p.State != sitestore.PairingDenied {
				t.Fatalf("denied pairing: %+v", p)
			}
			if _, found, _ := e.Store.Runner(ctx, "r2"); found {
				t.Fatal("a refused approval created a runner")
			}
		}},
		{"a user code is unique among live pairings and free again once its pairing expired", func(t *testing.T, e Env) {
			if err := e.Store.CreatePairing(ctx, pairing(e, "h1", "SAME-CODE")); err != nil {
				t.Fatal(err)
			}
			if err := e.Store.CreatePairing(ctx, pairing(e, "h2", "SAME-CODE")); !errors.Is(err, sitestore.ErrUserCodeTaken) {
				t.Fatalf("duplicate live code: %v", err)
			}
			if _, found, _ := e.Store.PairingByDeviceCodeHash(ctx, "h2"); found {
				t.Fatal("the refused pairing was stored")
			}
			e.advance(600_000)
			if err := e.Store.CreatePairing(ctx, pairing(e, "h3", "SAME-CODE")); err != nil {
				t.Fatalf("code of an expired pairing: %v", err)
			}
			if _, err := e.approve(t, "SAME-CODE", "alice", "r1"); err != nil {
				t.Fatalf("approving the live holder of a reused code: %v", err)
			}
			if p, _, _ := e.Store.PairingByDeviceCodeHash(ctx, "h3"); p.State != sitestore.PairingApproved {
				t.Fatalf("the wrong pairing was approved: %+v", p)
			}
		}},
		{"an approved pairing is collected exactly once", func(t *testing.T, e Env) {
			e.Store.CreatePairing(ctx, pairing(e, "h1", "ABCD-EFGH"))
			if ok, err := e.Store.CollectPairing(ctx, "h1"); ok || err != nil {
				t.Fatalf("collect of a pending pairing: %v %v", ok, err)
			}
			e.approve(t, "ABCD-EFGH", "alice", "r1")
			if ok, err := e.Store.CollectPairing(ctx, "h1"); !ok || err != nil {
				t.Fatalf("first collect: %v %v", ok, err)
			}
			if ok, _ := e.Store.CollectPairing(ctx, "h1"); ok {
				t.Fatal("collected twice")
			}
			if ok, _ := e.Store.CollectPairing(ctx, "unknown"); ok {
				t.Fatal("collected an unknown pairing")
			}
		}},
		{"a heartbeat touches the runner; revocation is one-way and keeps its first time", func(t *testing.T, e Env) {
			e.Store.CreatePairing(ctx, pairing(e, "h1", "ABCD-EFGH"))
			e.approve(t, "ABCD-EFGH", "alice", "r1")
			e.advance(1000)
			chat := []protocol.Capability{capability(protocol.KindChat, "ollama", protocol.AudienceTeam)}
			r, found, err := e.Store.TouchRunner(ctx, sitestore.TouchInput{RunnerID: "r1", Capabilities: chat, DaemonVersion: "0.2.0"})
			if err != nil || !found || r.LastHeartbeatAt != e.now() || r.DaemonVersion != "0.2.0" || r.Capabilities[0].Kind != protocol.KindChat {
				t.Fatalf("touch: %+v %v", r, err)
			}
			if _, found, _ := e.Store.TouchRunner(ctx, sitestore.TouchInput{RunnerID: "nope"}); found {
				t.Fatal("touched an unknown runner")
			}
			e.Store.RevokeRunner(ctx, "r1")
			first := e.now()
			e.advance(1000)
			e.Store.RevokeRunner(ctx, "r1")
			if r, _, _ := e.Store.Runner(ctx, "r1"); r.RevokedAt != first {
				t.Fatalf("revokedAt %d, want %d", r.RevokedAt, first)
			}
		}},
		{"runners are listed all together or by owner", func(t *testing.T, e Env) {
			e.Store.CreatePairing(ctx, pairing(e, "h1", "AAAA-AAAA"))
			e.Store.CreatePairing(ctx, pairing(e, "h2", "BBBB-BBBB"))
			e.approve(t, "AAAA-AAAA", "alice", "r1")
			e.approve(t, "BBBB-BBBB", "bob", "r2")
			all, err := e.Store.Runners(ctx, "")
			if err != nil || len(all) != 2 {
				t.Fatalf("all: %+v %v", all, err)
			}
			bobs, err := e.Store.Runners(ctx, "bob")
			if err != nil || len(bobs) != 1 || bobs[0].ID != "r2" {
				t.Fatalf("bob's: %+v %v", bobs, err)
			}
		}},
	}
}
