package site_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/protocol"
)

var okRan = protocol.RunMetadata{Model: "m", BackendClass: "http", DurationMs: 3}

func TestPublishSendsOnlyTheStubAndFillsItsDefaults(t *testing.T) {
	s := newSetup(t)
	stub := protocol.JobStub{ID: "j1", Kind: protocol.KindGenerate, Owner: "alice", DeadlineAt: start.Add(time.Hour).UnixMilli()}
	state, err := s.site.Publish(context.Background(), stub, protocol.GeneratePayload(strings.Repeat("x", 5000)))
	if err != nil || state != "queued" {
		t.Fatalf("publish = %q, %v", state, err)
	}
	got := s.relay.enqueued[0]
	if got.Site != s.keys.KeyID() || got.SizeClass != "medium" || got.Audience != "team" || got.Streaming {
		t.Fatalf("stub = %+v", got)
	}
	stub.Site = mustKeys(t).KeyID()
	if _, err := s.site.Publish(context.Background(), stub, protocol.GeneratePayload("x")); err == nil {
		t.Fatal("a stub naming another site's key was published")
	}
	if _, err := s.site.Publish(context.Background(), protocol.JobStub{ID: "j2", Kind: protocol.KindChat, Owner: "a",
		DeadlineAt: start.Add(time.Hour).UnixMilli()}, protocol.GeneratePayload("x")); err == nil {
		t.Fatal("a generate payload was published as a chat job")
	}
}

func TestAnEnqueueConflictIsARefusalNotARetry(t *testing.T) {
	s := newSetup(t)
	s.relay.set(func(f *fakeRelay) {
		f.refuse["enqueue"] = fakeRefusal{409, `{"error":"slot-waiting","message":"nothing can answer this right now — try again later"}`}
	})
	stub := protocol.JobStub{ID: "j1", Kind: protocol.KindGenerate, Owner: "alice", DeadlineAt: start.Add(time.Hour).UnixMilli()}
	_, err := s.site.Publish(context.Background(), stub, protocol.GeneratePayload("x"))
	var refused *site.EnqueueRefused
	if !errors.As(err, &refused) || refused.Code != "slot-waiting" {
		t.Fatalf("err = %v, want EnqueueRefused slot-waiting", err)
	}
	if s.site.Pending() != 0 {
		t.Fatal("a job the relay refused is still remembered")
	}
}

func TestPumpSealsThePayloadToTheClaimingDevice(t *testing.T) {
	s := newSetup(t)
	s.publishClaimed(t, "j1", "lease-1", protocol.GeneratePayload("hello"))
	rep, err := s.site.Pump(context.Background())
	if err != nil || len(rep.Sealed) != 1 {
		t.Fatalf("pump = %+v, %v", rep, err)
	}
	env, ok := s.relay.payload("j1")
	if !ok {
		t.Fatal("no payload posted")
	}
	plaintext, err := protocol.Open(env, s.device, s.keys.Public().Identity, protocol.ExpectedEnvelope{
		JobID: "j1", SenderKeyID: s.keys.KeyID(), RecipientKeyID: s.device.KeyID(), Direction: protocol.DirectionPayload,
	})
	if err != nil || plaintext != `{"prompt":"hello"}` {
		t.Fatalf("device opened %q, %v", plaintext, err)
	}
}

func TestPumpRefusesToSealToADeviceWhoseKeysDoNotVerify(t *testing.T) {
	s := newSetup(t)
	stub := protocol.JobStub{ID: "j1", Kind: protocol.KindGenerate, Owner: "alice", DeadlineAt: start.Add(time.Hour).UnixMilli()}
	if _, err := s.site.Publish(context.Background(), stub, protocol.GeneratePayload("secret")); err != nil {
		t.Fatal(err)
	}
	forged := s.device.Public()
	forged.Encryption = mustKeys(t).Public().Encryption // the relay's own key, say
	s.relay.set(func(f *fakeRelay) {
		f.pending = []protocol.SitePendingJob{{JobID: "j1", Device: &forged, RunnerID: "r", LeaseID: "l", AwaitingUntil: 1, LeaseExpiresAt: 1}}
	})
	rep, err := s.site.Pump(context.Background())
	if err != nil || len(rep.Sealed) != 0 || len(rep.Refused) != 1 {
		t.Fatalf("pump = %+v, %v", rep, err)
	}
	if _, posted := s.relay.payload("j1"); posted {
		t.Fatal("the payload was sealed to a key its identity never signed")
	}
}

func TestPumpAcceptsOnlyTheSealedToDevicesSignature(t *testing.T) {
	good := protocol.SealedOutcome{Outcome: protocol.OKOutcome("hi"), Ran: okRan}
	cases := []struct {
		name   string
		result func(s setup) protocol.SiteResult
		refuse string
	}{
		{"the device's own result is delivered", func(s setup) protocol.SiteResult {
			return s.result(t, "j1", "lease-1", "ok", s.device, s.device.Public(), good)
		}, ""},
		{"a result the relay attributes to another device is refused", func(s setup) protocol.SiteResult {
			other := mustKeys(t)
			return s.result(t, "j1", "lease-1", "ok", other, other.Public(), good)
		}, "different device"},
		{"the sealed device's result under a lease the site never saw is delivered", func(s setup) protocol.SiteResult {
			// The seal landed on a re-claim's lease (see lostseal_test.go).
			return s.result(t, "j1", "lease-9", "ok", s.device, s.device.Public(), good)
		}, ""},
		{"a result signed by another key but named as the device is refused", func(s setup) protocol.SiteResult {
			return s.result(t, "j1", "lease-1", "ok", mustKeys(t), s.device.Public(), good)
		}, "does not open"},
		{"a disposition that differs from the sealed outcome is refused", func(s setup) protocol.SiteResult {
			return s.result(t, "j1", "lease-1", "error", s.device, s.device.Public(), good)
		}, "disposition"},
		{"an outcome with an unknown key is refused", func(s setup) protocol.SiteResult {
			bad := good
			bad.Outcome.Code = "x" // an error field on an ok outcome
			return s.result(t, "j1", "lease-1", "ok", s.device, s.device.Public(), bad)
		}, "outcome"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetup(t)
			s.publishClaimed(t, "j1", "lease-1", protocol.GeneratePayload("hello"))
			if _, err := s.site.Pump(context.Background()); err != nil {
				t.Fatal(err)
			}
			res := tc.result(s)
			s.relay.set(func(f *fakeRelay) { f.pending, f.results = nil, []protocol.SiteResult{res} })
			rep, err := s.site.Pump(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if tc.refuse == "" {
				if len(rep.Results) != 1 || rep.Results[0].Outcome.TextOrEmpty() != "hi" || rep.Results[0].DeviceKeyID != s.device.KeyID() {
					t.Fatalf("report %+v", rep)
				}
				// Re-served until the deadline, delivered once.
				if again, _ := s.site.Pump(context.Background()); len(again.Results) != 0 || len(again.Refused) != 0 {
					t.Fatalf("second pump %+v", again)
				}
				return
			}
			if len(rep.Results) != 0 || len(rep.Refused) != 1 || !strings.Contains(rep.Refused[0].Reason, tc.refuse) {
				t.Fatalf("report %+v, want one refusal mentioning %q", rep, tc.refuse)
			}
			// Judged once, not on every cycle the relay re-serves it.
			if again, _ := s.site.Pump(context.Background()); len(again.Refused) != 0 {
				t.Fatalf("second pump %+v", again)
			}
		})
	}
}

func TestRelayWaitDefersTheCycleAndARefusalIsAnError(t *testing.T) {
	s := newSetup(t)
	s.relay.set(func(f *fakeRelay) {
		f.refuse["pending"] = fakeRefusal{503, `{"error":"not-ready","message":"draining"}`}
	})
	rep, err := s.site.Pump(context.Background())
	if err != nil || rep.Deferred == "" {
		t.Fatalf("pump = %+v, %v; want deferred", rep, err)
	}
	s.relay.set(func(f *fakeRelay) {
		f.refuse["pending"] = fakeRefusal{401, `{"error":"unauthorized","message":"signature check failed"}`}
	})
	if _, err := s.site.Pump(context.Background()); err == nil || site.IsRetryable(err) {
		t.Fatalf("pump after 401 = %v, want a non-retryable error", err)
	}
}

func TestACancelledJobIsNeverSealed(t *testing.T) {
	s := newSetup(t)
	s.publishClaimed(t, "j1", "lease-1", protocol.GeneratePayload("hello"))
	if ok, err := s.site.Cancel(context.Background(), "j1"); err != nil || !ok {
		t.Fatalf("cancel = %v, %v", ok, err)
	}
	rep, err := s.site.Pump(context.Background())
	if err != nil || len(rep.Sealed) != 0 || len(rep.Refused) != 1 {
		t.Fatalf("pump = %+v, %v", rep, err)
	}
}

func TestAResultForAJobNeverSealedToAnyDeviceIsRefused(t *testing.T) {
	s := newSetup(t)
	stub := protocol.JobStub{ID: "j1", Kind: protocol.KindGenerate, Owner: "alice", DeadlineAt: start.Add(time.Hour).UnixMilli()}
	if _, err := s.site.Publish(context.Background(), stub, protocol.GeneratePayload("hello")); err != nil {
		t.Fatal(err)
	}
	res := s.result(t, "j1", "lease-1", "ok", s.device, s.device.Public(), protocol.SealedOutcome{Outcome: protocol.OKOutcome("hi"), Ran: okRan})
	s.relay.set(func(f *fakeRelay) { f.results = []protocol.SiteResult{res} })
	rep, err := s.site.Pump(context.Background())
	if err != nil || len(rep.Results) != 0 || len(rep.Refused) != 1 || !strings.Contains(rep.Refused[0].Reason, "never sealed") {
		t.Fatalf("pump = %+v, %v; want one refusal", rep, err)
	}
}

func TestAnUnansweredPublishIsPostedAgainByThePump(t *testing.T) {
	s := newSetup(t)
	s.relay.set(func(f *fakeRelay) {
		f.refuse["enqueue"] = fakeRefusal{503, `{"error":"server-error","message":"busy"}`}
	})
	stub := protocol.JobStub{ID: "j1", Kind: protocol.KindGenerate, Owner: "alice", DeadlineAt: start.Add(time.Hour).UnixMilli()}
	if _, err := s.site.Publish(context.Background(), stub, protocol.GeneratePayload("x")); !site.IsRetryable(err) {
		t.Fatalf("publish = %v, want a retryable error", err)
	}
	s.relay.set(func(f *fakeRelay) { delete(f.refuse, "enqueue") })
	if rep, err := s.site.PumpSeals(context.Background()); err != nil || rep.Deferred != "" {
		t.Fatalf("pump = %+v, %v", rep, err)
	}
	if len(s.relay.enqueued) != 1 || s.relay.enqueued[0].ID != "j1" {
		t.Fatalf("enqueued %+v, want j1 once", s.relay.enqueued)
	}
	if _, err := s.site.PumpSeals(context.Background()); err != nil || len(s.relay.enqueued) != 1 {
		t.Fatalf("posted again once accepted: %+v, %v", s.relay.enqueued, err)
	}
	// A stub the relay calls malformed is that job's problem, not the
	// pump's: it is refused and dropped, and the cycle goes on.
	s.relay.set(func(f *fakeRelay) {
		f.refuse["enqueue"] = fakeRefusal{503, `{"error":"server-error","message":"busy"}`}
	})
	stub.ID = "j2"
	if _, err := s.site.Publish(context.Background(), stub, protocol.GeneratePayload("x")); !site.IsRetryable(err) {
		t.Fatalf("publish j2 = %v", err)
	}
	s.relay.set(func(f *fakeRelay) { f.refuse["enqueue"] = fakeRefusal{400, `{"error":"bad-request","message":"no"}`} })
	rep, err := s.site.PumpSeals(context.Background())
	if err != nil || len(rep.Refused) != 1 || rep.Refused[0].JobID != "j2" || s.site.Pending() != 1 {
		t.Fatalf("pump = %+v, %v, pending %d; want j2 refused and dropped", rep, err, s.site.Pending())
	}
}
