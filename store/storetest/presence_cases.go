package storetest

import (
	"slices"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

func capability(model string) protocol.Capability {
	return protocol.Capability{
		Kind: "llm.generate", Service: model, BackendID: "ollama",
		BackendClass: "process", Model: model, OfferScope: "private",
	}
}

func (e *env) seen(runnerID, owner string, caps []protocol.Capability, withheld []protocol.WithheldKind) store.Presence {
	e.Helper()
	p, err := e.s.Seen(e.ctx, store.Sighting{
		RunnerID: runnerID, Owner: owner, Device: device(runnerID),
		Capabilities: caps, Withheld: withheld,
	})
	e.check(err)
	return p
}

func (e *env) presence(runnerID string) (store.Presence, bool) {
	e.Helper()
	p, ok, err := e.s.Presence(e.ctx, runnerID)
	e.check(err)
	return p, ok
}

var presenceCases = []testCase{
	{"remembers a device, and what it says it can run", func(e *env) {
		llama := capability("llama3")
		llama.KnownModels = []string{"llama3", "llama3:70b"}
		caps := []protocol.Capability{llama, capability("mistral")}
		withheld := []protocol.WithheldKind{{Kind: "llm.chat", Claimants: []protocol.Claimant{{Service: "a", Offer: "team"}, {Service: "b", Offer: "private"}}}}
		now := e.nowMs()
		stored := e.seen("runner_1", "alice", caps, withheld)
		want := store.Presence{RunnerID: "runner_1", Owner: "alice", Device: device("runner_1"), LastSeenAt: now, Capabilities: caps, Withheld: withheld}
		e.same("returned", stored, want)
		known, ok := e.presence("runner_1")
		e.same("found", ok, true)
		e.same("read back exactly, in order", known, want)
	}},

	{"replaces the matrix rather than merging it", func(e *env) {
		// A union would go on advertising a backend the machine lost, and
		// work would route to it.
		e.seen("runner_2", "alice", []protocol.Capability{capability("llama3")}, nil)
		e.seen("runner_2", "alice", []protocol.Capability{capability("mistral")}, nil)
		known, _ := e.presence("runner_2")
		e.same("capabilities", known.Capabilities, []protocol.Capability{capability("mistral")})
	}},

	{"keeps an empty matrix, because empty is an answer", func(e *env) {
		// A paired machine with no healthy backend; keeping the last
		// non-empty matrix would show models that are gone.
		e.seen("runner_3", "alice", []protocol.Capability{capability("llama3")}, nil)
		e.seen("runner_3", "alice", []protocol.Capability{}, nil)
		known, _ := e.presence("runner_3")
		if known.Capabilities == nil || len(known.Capabilities) != 0 {
			e.Fatalf("capabilities = %#v, want an empty, non-nil list", known.Capabilities)
		}
		if known.Withheld == nil {
			e.Fatalf("withheld is nil, want an empty list")
		}
	}},

	{"remembers which kinds are withheld, and drops them when resolved", func(e *env) {
		withheld := []protocol.WithheldKind{{Kind: "llm.generate", Claimants: []protocol.Claimant{{Service: "ollama", Offer: "team"}, {Service: "mlx", Offer: "private"}}}}
		e.seen("runner_w", "alice", []protocol.Capability{}, withheld)
		held, _ := e.presence("runner_w")
		e.same("withheld", held.Withheld, withheld)
		e.seen("runner_w", "alice", []protocol.Capability{capability("llama3")}, []protocol.WithheldKind{})
		held, _ = e.presence("runner_w")
		e.same("withheld after the owner chose", len(held.Withheld), 0)
	}},

	{"keeps the first owner and device of a record", func(e *env) {
		e.seen("runner_k", "alice", nil, nil)
		e.advance(1_000)
		_, err := e.s.Seen(e.ctx, store.Sighting{RunnerID: "runner_k", Owner: "mallory", Device: device("other"), Capabilities: []protocol.Capability{capability("x")}})
		e.check(err)
		known, _ := e.presence("runner_k")
		e.same("owner", known.Owner, "alice")
		e.same("device", known.Device, device("runner_k"))
		e.same("capabilities", known.Capabilities, []protocol.Capability{capability("x")})
	}},

	{"stamps presence from its own clock, and moves it on the next beat", func(e *env) {
		before := e.nowMs()
		first := e.seen("runner_4", "alice", nil, nil)
		e.same("first beat", first.LastSeenAt, before)
		e.advance(7_000)
		later := e.seen("runner_4", "alice", nil, nil)
		e.same("next beat", later.LastSeenAt, before+7_000)
		known, _ := e.presence("runner_4")
		e.same("stored", known.LastSeenAt, before+7_000)
	}},

	{"lists everyone it has seen", func(e *env) {
		e.seen("runner_5", "alice", nil, nil)
		e.seen("runner_6", "bob", nil, nil)
		everyone, err := e.s.Everyone(e.ctx)
		e.check(err)
		var got []string
		for _, p := range everyone {
			got = append(got, p.RunnerID)
		}
		slices.Sort(got)
		e.same("everyone", got, []string{"runner_5", "runner_6"})
	}},

	{"does not know a runner it has never seen", func(e *env) {
		if p, ok := e.presence("runner_never"); ok {
			e.Fatalf("found %+v", p)
		}
	}},

	{"forgets a dropped record until the device is seen again", func(e *env) {
		d, ok := e.s.(PresenceDropper)
		if !ok {
			e.Skip("store has no DropPresence test hook")
		}
		e.seen("runner_7", "alice", []protocol.Capability{capability("llama3")}, nil)
		e.check(d.DropPresence(e.ctx, "runner_7"))
		if _, ok := e.presence("runner_7"); ok {
			e.Fatalf("a dropped record is still present")
		}
		everyone, err := e.s.Everyone(e.ctx)
		e.check(err)
		e.same("everyone", len(everyone), 0)
		fresh := e.seen("runner_7", "bob", nil, nil)
		e.same("rebuilt owner", fresh.Owner, "bob")
	}},
}
