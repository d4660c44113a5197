package storetest

import (
	"fmt"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

func (e *env) pending(n int) store.PendingPairing {
	return store.PendingPairing{
		DeviceCode:    fmt.Sprintf("device-code-%d", n),
		UserCode:      fmt.Sprintf("AB%02d-CD%02d", n%100, n/100),
		Device:        device(fmt.Sprintf("pairing-%d", n)),
		Capabilities:  []protocol.Capability{capability("llama3")},
		Label:         "laptop",
		Platform:      "darwin",
		DaemonVersion: "0.1.1",
		ExpiresAt:     e.nowMs() + store.PairingCodeTTLMs,
	}
}

// listed is what ListPairings says, as the user codes in its order, after
// checking that no entry carries its device code.
func (e *env) listed(limit int) []string {
	e.Helper()
	list, err := e.s.ListPairings(e.ctx, limit)
	e.check(err)
	codes := []string{}
	for _, p := range list {
		if p.DeviceCode != "" {
			e.Fatalf("the list carries %s's device code", p.UserCode)
		}
		codes = append(codes, p.UserCode)
	}
	return codes
}

// unlisted is p as the list shows it.
func unlisted(p store.PendingPairing) store.PendingPairing {
	p.DeviceCode = ""
	return p
}

func (e *env) put(p store.PendingPairing) store.PutResult {
	e.Helper()
	res, err := e.s.PutPairing(e.ctx, p)
	e.check(err)
	return res
}

func (e *env) byDevice(code string) (store.PendingPairing, bool) {
	e.Helper()
	p, ok, err := e.s.PairingByDeviceCode(e.ctx, code)
	e.check(err)
	return p, ok
}

func (e *env) byUser(code string) (store.PendingPairing, bool) {
	e.Helper()
	p, ok, err := e.s.PairingByUserCode(e.ctx, code)
	e.check(err)
	return p, ok
}

var pairingCases = []testCase{
	{"finds a stored code by the daemon's secret and by the code a person typed", func(e *env) {
		p := e.pending(1)
		e.same("put", e.put(p), store.PutStored)
		got, ok := e.byDevice(p.DeviceCode)
		e.same("found by device code", ok, true)
		e.same("by device code", got, p)
		got, ok = e.byUser("  ab01-cd00 ")
		e.same("found by a sloppily typed user code", ok, true)
		e.same("by user code", got, p)
		if _, ok := e.byDevice("nope"); ok {
			e.Fatalf("found an unknown device code")
		}
		if _, ok := e.byUser("ZZZZ-ZZZZ"); ok {
			e.Fatalf("found an unknown user code")
		}
	}},

	{"keeps one code per keypair", func(e *env) {
		// A restarted pairing replaces its own request, so the code on screen
		// is always the live one.
		first := e.pending(1)
		second := e.pending(2)
		second.Device = first.Device
		e.put(first)
		e.same("put", e.put(second), store.PutStored)
		if _, ok := e.byDevice(first.DeviceCode); ok {
			e.Fatalf("the replaced device code still resolves")
		}
		if _, ok := e.byUser(first.UserCode); ok {
			e.Fatalf("the replaced user code still resolves")
		}
		if _, ok := e.byDevice(second.DeviceCode); !ok {
			e.Fatalf("the new code does not resolve")
		}
	}},

	{"refuses codes over the ceiling, and lets expired ones make room", func(e *env) {
		e.rebuild(store.Options{PairingCapacity: 3})
		for n := range 3 {
			e.same(fmt.Sprintf("put %d", n), e.put(e.pending(n)), store.PutStored)
		}
		e.same("over the ceiling", e.put(e.pending(3)), store.PutAtCapacity)
		if _, ok := e.byDevice(e.pending(3).DeviceCode); ok {
			e.Fatalf("a refused code was stored")
		}
		// A keypair replacing its own code is not a new pairing.
		again := e.pending(4)
		again.Device = e.pending(0).Device
		e.same("replacing its own", e.put(again), store.PutStored)

		// Expired codes are dropped before counting, or the cap would latch.
		e.advance(store.PairingCodeTTLMs)
		e.same("after the old ones expired", e.put(e.pending(5)), store.PutStored)
		e.same("and the next", e.put(e.pending(6)), store.PutStored)
	}},

	{"holds five hundred codes at once by default", func(e *env) {
		for n := range store.MaxOutstandingPairings {
			if res := e.put(e.pending(n)); res != store.PutStored {
				e.Fatalf("put %d: %s", n, res)
			}
		}
		e.same("the five hundred and first", e.put(e.pending(store.MaxOutstandingPairings)), store.PutAtCapacity)
	}},

	{"stops resolving a code when it expires", func(e *env) {
		p := e.pending(1)
		e.put(p)
		e.advance(store.PairingCodeTTLMs - 1)
		if _, ok := e.byDevice(p.DeviceCode); !ok {
			e.Fatalf("a live code does not resolve")
		}
		e.advance(1)
		if _, ok := e.byDevice(p.DeviceCode); ok {
			e.Fatalf("an expired code resolves by device code")
		}
		if _, ok := e.byUser(p.UserCode); ok {
			e.Fatalf("an expired code resolves by user code")
		}
	}},

	{"is single use once dropped", func(e *env) {
		p := e.pending(1)
		e.put(p)
		e.check(e.s.DropPairing(e.ctx, p.DeviceCode))
		if _, ok := e.byDevice(p.DeviceCode); ok {
			e.Fatalf("a dropped code resolves")
		}
		if _, ok := e.byUser(p.UserCode); ok {
			e.Fatalf("a dropped code resolves by user code")
		}
		e.check(e.s.DropPairing(e.ctx, "never-stored"))
	}},

	{"lists live pairings newest first, whole but for the device code", func(e *env) {
		first := e.pending(1)
		e.put(first)
		e.advance(1000)
		second, third := e.pending(2), e.pending(3)
		e.put(second)
		e.put(third) // the same instant: the higher identity key first
		list, err := e.s.ListPairings(e.ctx, 10)
		e.check(err)
		e.same("the list", list, []store.PendingPairing{unlisted(third), unlisted(second), unlisted(first)})
	}},

	{"lists at most the limit asked for, the newest", func(e *env) {
		for n := range 5 {
			e.put(e.pending(n))
			e.advance(1)
		}
		e.same("two of five", e.listed(2), []string{e.pending(4).UserCode, e.pending(3).UserCode})
		e.same("a limit of zero", e.listed(0), []string{})
		e.same("a limit above what there is", len(e.listed(50)), 5)
	}},

	{"leaves expired, dropped, replaced and refused pairings off the list", func(e *env) {
		e.rebuild(store.Options{PairingCapacity: 3})
		old, dropped, replaced := e.pending(1), e.pending(2), e.pending(3)
		e.put(old)
		e.advance(1000)
		e.put(dropped)
		e.put(replaced)
		e.same("refused at the ceiling", e.put(e.pending(4)), store.PutAtCapacity)
		e.check(e.s.DropPairing(e.ctx, dropped.DeviceCode))
		e.advance(1000)
		replacement := e.pending(5)
		replacement.Device = replaced.Device
		e.put(replacement)
		e.same("after a drop and a replacement", e.listed(10), []string{replacement.UserCode, old.UserCode})
		// old expires two seconds before the replacement.
		e.advance(store.PairingCodeTTLMs - 2000)
		e.same("as the oldest expires", e.listed(10), []string{replacement.UserCode})
		e.advance(2000)
		e.same("once all have expired", e.listed(10), []string{})
	}},

	{"lists a keypair's code once when it is replaced in the same millisecond", func(e *env) {
		first, second := e.pending(1), e.pending(2)
		second.Device = first.Device
		e.put(first)
		e.put(second)
		list, err := e.s.ListPairings(e.ctx, 10)
		e.check(err)
		e.same("the list", list, []store.PendingPairing{unlisted(second)})
		e.check(e.s.DropPairing(e.ctx, second.DeviceCode))
		e.same("after the drop", e.listed(10), []string{})
	}},
}
