package relay_test

import (
	"strings"
	"testing"

	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/protocol"
)

func fetchBody(d *relaytest.Daemon, r protocol.GrantRef) protocol.FetchRequest {
	return protocol.FetchRequest{ProtocolVersion: "2", RunnerID: d.RunnerID, JobID: r.JobID, LeaseID: r.LeaseID}
}

func resultBody(d *relaytest.Daemon, r protocol.GrantRef, env protocol.SealedEnvelope) protocol.ResultRequest {
	return protocol.ResultRequest{ProtocolVersion: "2", RunnerID: d.RunnerID, JobID: r.JobID, LeaseID: r.LeaseID, Envelope: env, Disposition: "ok"}
}

func releaseBody(d *relaytest.Daemon, reason string, refs ...protocol.GrantRef) protocol.ReleaseRequest {
	return protocol.ReleaseRequest{ProtocolVersion: "2", RunnerID: d.RunnerID, Leases: refs, Reason: reason}
}

func TestFetch(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f)
		second := relaytest.NewDaemon(t, "runner-2", "alice")
		w.project(w.base().Device(second).Consent("alice", "site-a"))
		w.enqueue(w.site, "job-1", "alice")
		job := w.claim(w.daemon, 1)[0]
		grant := ref(job)

		t.Run("before the site seals: not ready, keep polling", func(t *testing.T) {
			expect(t, w.daemonCall(w.daemon, "fetch", fetchBody(w.daemon, grant)), 409, errBody("not-ready", "the site has not sealed this job yet"))
		})
		t.Run("another runner naming the lease is not the holder", func(t *testing.T) {
			expect(t, w.daemonCall(second, "fetch", fetchBody(second, grant)), 403, errBody("forbidden", "this runner does not hold the job"))
		})
		t.Run("another runner naming a bogus lease learns nothing", func(t *testing.T) {
			expect(t, w.daemonCall(second, "fetch", fetchBody(second, protocol.GrantRef{JobID: "job-1", LeaseID: "bogus"})), 404, errBody("not-found", "unknown job"))
		})
		t.Run("the holder with a lease that is not current is told its grant ended", func(t *testing.T) {
			expect(t, w.daemonCall(w.daemon, "fetch", fetchBody(w.daemon, protocol.GrantRef{JobID: "job-1", LeaseID: "bogus"})), 403, errBody("forbidden", "that lease is no longer current"))
		})
		t.Run("an unknown job is not found", func(t *testing.T) {
			expect(t, w.daemonCall(w.daemon, "fetch", fetchBody(w.daemon, protocol.GrantRef{JobID: "nope", LeaseID: grant.LeaseID})), 404, errBody("not-found", "unknown job"))
		})
		env := w.site.Seal(t, "job-1", "the prompt", w.daemon.Public(), w.deadline())
		expectStatus(t, w.siteCall(w.site, "payload", protocol.PayloadRequest{ProtocolVersion: "2", SiteID: "site-a", JobID: "job-1", Envelope: env}), 200)
		t.Run("after the seal: the envelope, byte for byte, and again on a repeat", func(t *testing.T) {
			want := `{"envelope":` + encodeJS(t, env) + `}`
			expect(t, w.daemonCall(w.daemon, "fetch", fetchBody(w.daemon, grant)), 200, want)
			expect(t, w.daemonCall(w.daemon, "fetch", fetchBody(w.daemon, grant)), 200, want)
			opened, err := protocol.Open(env, w.daemon.Keys, w.site.Public().Identity, protocol.ExpectedEnvelope{
				JobID: "job-1", SenderKeyID: w.site.KeyID(), RecipientKeyID: w.daemon.Keys.KeyID(), Direction: "payload",
			})
			if err != nil || opened != "the prompt" {
				t.Fatalf("open: %q %v", opened, err)
			}
		})
		t.Run("after the result: too late, stop", func(t *testing.T) {
			result := w.daemon.SealResult(t, "job-1", "the answer", w.site.Public(), w.deadline())
			expect(t, w.daemonCall(w.daemon, "result", resultBody(w.daemon, grant, result)), 200, `{"accepted":true,"state":"done"}`)
			expect(t, w.daemonCall(w.daemon, "fetch", fetchBody(w.daemon, grant)), 409, errBody("too-late", "this job has already finished"))
		})
		w.noSecretsLogged(env.Ciphertext)
	})
}

func TestResult(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f)
		second := relaytest.NewDaemon(t, "runner-2", "alice")
		w.project(w.base().Device(second).Consent("alice", "site-a"))
		w.enqueue(w.site, "job-1", "alice")
		job := w.claim(w.daemon, 1)[0]
		grant := ref(job)
		w.seal(w.site, "job-1", w.daemon.Public())
		result := w.daemon.SealResult(t, "job-1", "the answer", w.site.Public(), w.deadline())

		// The ceiling is checked before any store call, so the store cannot
		// change the answer; six megabytes are built once, on the memory run.
		sizeCheck := func(name string, test func(t *testing.T)) {
			if f.name == "memory" {
				t.Run(name, test)
			}
		}
		sizeCheck("an envelope over the ceiling is refused and nothing is stored", func(t *testing.T) {
			big := result
			big.Ciphertext = strings.Repeat("A", protocol.MaxEnvelopeBytes)
			resp := w.daemonCall(w.daemon, "result", resultBody(w.daemon, grant, big))
			n := protocol.EnvelopeBytes(big)
			expect(t, resp, 400, errBody("bad-request", protocol.TooLargeMessage(n, protocol.MaxEnvelopeBytes)+" Every plan has the same ceiling."))
			stored, _, _ := w.store.Job(w.ctx, "site-a", "job-1")
			if stored.State != "ready" || stored.Result != nil {
				t.Fatalf("job %+v", stored)
			}
		})
		t.Run("another runner is not the holder", func(t *testing.T) {
			expect(t, w.daemonCall(second, "result", resultBody(second, grant, result)), 403, errBody("forbidden", "this runner does not hold the job"))
		})
		t.Run("a stale lease is refused and records nothing", func(t *testing.T) {
			expect(t, w.daemonCall(w.daemon, "result", resultBody(w.daemon, protocol.GrantRef{JobID: "job-1", LeaseID: "old"}, result)), 403, errBody("forbidden", "that lease is no longer current"))
		})
		t.Run("an unknown job is not found", func(t *testing.T) {
			expect(t, w.daemonCall(w.daemon, "result", resultBody(w.daemon, protocol.GrantRef{JobID: "nope", LeaseID: "x"}, result)), 404, errBody("not-found", "unknown job"))
		})
		t.Run("a bad disposition fails the schema", func(t *testing.T) {
			body := resultBody(w.daemon, grant, result)
			body.Disposition = "maybe"
			expect(t, w.daemonCall(w.daemon, "result", body), 400, errBody("bad-request", "request failed schema validation"))
		})
		t.Run("accepted once, then answered as already recorded", func(t *testing.T) {
			expect(t, w.daemonCall(w.daemon, "result", resultBody(w.daemon, grant, result)), 200, `{"accepted":true,"state":"done"}`)
			other := w.daemon.SealResult(t, "job-1", "a different answer", w.site.Public(), w.deadline())
			expect(t, w.daemonCall(w.daemon, "result", resultBody(w.daemon, grant, other)), 200, `{"accepted":false,"duplicate":true,"state":"done"}`)
			stored, _, _ := w.store.Job(w.ctx, "site-a", "job-1")
			if stored.Result == nil || stored.Result.Ciphertext != result.Ciphertext {
				t.Fatal("a replay overwrote the result")
			}
		})
		t.Run("the site collects it, with the grant and the owner it ran under", func(t *testing.T) {
			resp := w.siteCall(w.site, "results", nil)
			want := `{"jobs":[{"jobId":"job-1","envelope":` + encodeJS(t, result) + `,"disposition":"ok","runnerId":"runner-1","leaseId":"` +
				grant.LeaseID + `","device":` + encodeJS(t, w.daemon.Public()) + `,"runnerOwner":"alice"}]}`
			expect(t, resp, 200, want)
			// No acknowledgement: listed again on the next poll.
			expect(t, w.siteCall(w.site, "results", nil), 200, want)
			opened, err := protocol.Open(result, w.site.Keys, w.daemon.Public().Identity, protocol.ExpectedEnvelope{
				JobID: "job-1", SenderKeyID: w.daemon.Keys.KeyID(), RecipientKeyID: w.site.KeyID(), Direction: "result",
			})
			if err != nil || opened != "the answer" {
				t.Fatalf("open: %q %v", opened, err)
			}
		})
		t.Run("a release never un-finishes a job", func(t *testing.T) {
			expect(t, w.daemonCall(w.daemon, "release", releaseBody(w.daemon, "shutdown", grant)), 200, `{"released":[]}`)
		})
		w.noSecretsLogged(result.Ciphertext)
	})
}

func TestRelease(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		t.Run("refused: back in the queue, never offered to this device again", func(t *testing.T) {
			w := newWorld(t, f)
			w.enqueue(w.site, "job-1", "alice")
			job := w.claim(w.daemon, 1)[0]
			expect(t, w.daemonCall(w.daemon, "release", releaseBody(w.daemon, "refused", ref(job))), 200, `{"released":["job-1"]}`)
			stored, _, _ := w.store.Job(w.ctx, "site-a", "job-1")
			if stored.State != "queued" || stored.ClaimedBy != nil {
				t.Fatalf("job %+v", stored)
			}
			if got := w.claim(w.daemon, 1); len(got) != 0 {
				t.Fatalf("re-offered %+v", got)
			}
		})
		t.Run("shutdown: the same device may claim it again", func(t *testing.T) {
			w := newWorld(t, f)
			w.enqueue(w.site, "job-1", "alice")
			job := w.claim(w.daemon, 1)[0]
			expect(t, w.daemonCall(w.daemon, "release", releaseBody(w.daemon, "shutdown", ref(job))), 200, `{"released":["job-1"]}`)
			again := w.claim(w.daemon, 1)
			if len(again) != 1 || again[0].Lease.ID == job.Lease.ID {
				t.Fatalf("re-claim %+v", again)
			}
		})
		t.Run("a grant that does not resolve is skipped silently", func(t *testing.T) {
			w := newWorld(t, f)
			expect(t, w.daemonCall(w.daemon, "release", releaseBody(w.daemon, "pause", protocol.GrantRef{JobID: "x", LeaseID: "y"})), 200, `{"released":[]}`)
		})
		t.Run("a reason outside the vocabulary fails the schema", func(t *testing.T) {
			w := newWorld(t, f)
			expect(t, w.daemonCall(w.daemon, "release", releaseBody(w.daemon, "bored")), 400, errBody("bad-request", "request failed schema validation"))
		})
	})
}
