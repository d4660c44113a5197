package sitestoretest

import (
	"errors"

	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

func (e *env) pairing(hash, code string) sitestore.Pairing {
	return sitestore.Pairing{DeviceCodeHash: hash, UserCode: code, State: sitestore.PairingPending,
		Label: "laptop", Platform: "linux", DaemonVersion: "0.1.1",
		Capabilities: generate,
		Device:       protocol.PublicIdentity{Identity: "id-" + hash, Encryption: "enc-" + hash, EncryptionSig: "sig"},
		ExpiresAt:    e.now() + 600_000, CreatedAt: e.now()}
}

func (e *env) approve(code, owner, runner string) (sitestore.Runner, error) {
	e.Helper()
	return e.s.ApprovePairing(e.ctx, sitestore.ApproveInput{UserCode: code, Owner: owner, RunnerID: runner})
}

var pairingCases = []testCase{
	{"approval creates the runner the user saw and binds it to the approving owner", func(e *env) {
		p := e.pairing("h1", "ABCD-EFGH")
		if err := e.s.CreatePairing(e.ctx, p); err != nil {
			e.Fatal(err)
		}
		r, err := e.approve("ABCD-EFGH", "alice", "runner_1")
		if err != nil {
			e.Fatal(err)
		}
		if r.ID != "runner_1" || r.Owner != "alice" || r.Device != p.Device || r.Label != "laptop" ||
			len(r.Capabilities) != 1 || r.RevokedAt != 0 || r.LastHeartbeatAt != e.now() {
			e.Fatalf("runner: %+v", r)
		}
		got, found, err := e.s.PairingByDeviceCodeHash(e.ctx, "h1")
		if err != nil || !found || got.State != sitestore.PairingApproved || got.Owner != "alice" || got.RunnerID != "runner_1" || got.Collected {
			e.Fatalf("pairing: %+v %v", got, err)
		}
		stored, found, _ := e.s.Runner(e.ctx, "runner_1")
		if !found || stored.Owner != "alice" {
			e.Fatalf("stored runner: %+v", stored)
		}
	}},
	{"approval refuses an unknown, an expired and an already-decided code", func(e *env) {
		if _, err := e.approve("NOPE-NOPE", "alice", "r"); !errors.Is(err, sitestore.ErrPairingUnknown) {
			e.Fatalf("unknown: %v", err)
		}
		e.s.CreatePairing(e.ctx, e.pairing("h1", "AAAA-AAAA"))
		e.advance(600_000)
		if _, err := e.approve("AAAA-AAAA", "alice", "r"); !errors.Is(err, sitestore.ErrPairingExpired) {
			e.Fatalf("expired: %v", err)
		}
		e.s.CreatePairing(e.ctx, e.pairing("h2", "BBBB-BBBB"))
		if _, err := e.approve("BBBB-BBBB", "alice", "r1"); err != nil {
			e.Fatal(err)
		}
		if _, err := e.approve("BBBB-BBBB", "mallory", "r2"); !errors.Is(err, sitestore.ErrPairingNotPending) {
			e.Fatalf("second approval: %v", err)
		}
		e.s.CreatePairing(e.ctx, e.pairing("h3", "CCCC-CCCC"))
		if err := e.s.DenyPairing(e.ctx, "CCCC-CCCC"); err != nil {
			e.Fatal(err)
		}
		if _, err := e.approve("CCCC-CCCC", "alice", "r3"); !errors.Is(err, sitestore.ErrPairingNotPending) {
			e.Fatalf("approval after denial: %v", err)
		}
		if p, _, _ := e.s.PairingByDeviceCodeHash(e.ctx, "h3"); p.State != sitestore.PairingDenied {
			e.Fatalf("denied pairing: %+v", p)
		}
		if _, found, _ := e.s.Runner(e.ctx, "r2"); found {
			e.Fatal("a refused approval created a runner")
		}
	}},
	{"a user code is unique among live pairings and free again once its pairing expired", func(e *env) {
		if err := e.s.CreatePairing(e.ctx, e.pairing("h1", "SAME-CODE")); err != nil {
			e.Fatal(err)
		}
		if err := e.s.CreatePairing(e.ctx, e.pairing("h2", "SAME-CODE")); !errors.Is(err, sitestore.ErrUserCodeTaken) {
			e.Fatalf("duplicate live code: %v", err)
		}
		if _, found, _ := e.s.PairingByDeviceCodeHash(e.ctx, "h2"); found {
			e.Fatal("the refused pairing was stored")
		}
		e.advance(600_000)
		if err := e.s.CreatePairing(e.ctx, e.pairing("h3", "SAME-CODE")); err != nil {
			e.Fatalf("code of an expired pairing: %v", err)
		}
		if _, err := e.approve("SAME-CODE", "alice", "r1"); err != nil {
			e.Fatalf("approving the live holder of a reused code: %v", err)
		}
		if p, _, _ := e.s.PairingByDeviceCodeHash(e.ctx, "h3"); p.State != sitestore.PairingApproved {
			e.Fatalf("the wrong pairing was approved: %+v", p)
		}
	}},
	{"an approved pairing is collected exactly once", func(e *env) {
		e.s.CreatePairing(e.ctx, e.pairing("h1", "ABCD-EFGH"))
		if ok, err := e.s.CollectPairing(e.ctx, "h1"); ok || err != nil {
			e.Fatalf("collect of a pending pairing: %v %v", ok, err)
		}
		e.approve("ABCD-EFGH", "alice", "r1")
		if ok, err := e.s.CollectPairing(e.ctx, "h1"); !ok || err != nil {
			e.Fatalf("first collect: %v %v", ok, err)
		}
		if ok, _ := e.s.CollectPairing(e.ctx, "h1"); ok {
			e.Fatal("collected twice")
		}
		if ok, _ := e.s.CollectPairing(e.ctx, "unknown"); ok {
			e.Fatal("collected an unknown pairing")
		}
	}},
	{"a heartbeat touches the runner; revocation is one-way and keeps its first time", func(e *env) {
		e.s.CreatePairing(e.ctx, e.pairing("h1", "ABCD-EFGH"))
		e.approve("ABCD-EFGH", "alice", "r1")
		e.advance(1000)
		chat := []protocol.Capability{capability(protocol.KindChat, "ollama", protocol.AudienceTeam)}
		r, found, err := e.s.TouchRunner(e.ctx, sitestore.TouchInput{RunnerID: "r1", Capabilities: chat, DaemonVersion: "0.2.0"})
		if err != nil || !found || r.LastHeartbeatAt != e.now() || r.DaemonVersion != "0.2.0" || r.Capabilities[0].Kind != protocol.KindChat {
			e.Fatalf("touch: %+v %v", r, err)
		}
		if _, found, _ := e.s.TouchRunner(e.ctx, sitestore.TouchInput{RunnerID: "nope"}); found {
			e.Fatal("touched an unknown runner")
		}
		e.s.RevokeRunner(e.ctx, "r1")
		first := e.now()
		e.advance(1000)
		e.s.RevokeRunner(e.ctx, "r1")
		if r, _, _ := e.s.Runner(e.ctx, "r1"); r.RevokedAt != first {
			e.Fatalf("revokedAt %d, want %d", r.RevokedAt, first)
		}
	}},
	{"runners are listed all together or by owner", func(e *env) {
		e.s.CreatePairing(e.ctx, e.pairing("h1", "AAAA-AAAA"))
		e.s.CreatePairing(e.ctx, e.pairing("h2", "BBBB-BBBB"))
		e.approve("AAAA-AAAA", "alice", "r1")
		e.approve("BBBB-BBBB", "bob", "r2")
		all, err := e.s.Runners(e.ctx, "")
		if err != nil || len(all) != 2 {
			e.Fatalf("all: %+v %v", all, err)
		}
		bobs, err := e.s.Runners(e.ctx, "bob")
		if err != nil || len(bobs) != 1 || bobs[0].ID != "r2" {
			e.Fatalf("bob's: %+v %v", bobs, err)
		}
	}},
}
