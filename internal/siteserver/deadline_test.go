package siteserver_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/siteserver"
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// TestTheDaemonEndpointsRefuseWorkPastItsDeadline holds a job through the
// daemon endpoints, heartbeating, past its absolute deadline: the fetch and
// the result are then refused with the relay's word for a late result
// (404 not-found, the protocol's error body), the heartbeat reports the
// lease lost, and the job reads expired.
func TestTheDaemonEndpointsRefuseWorkPastItsDeadline(t *testing.T) {
	eachDirectWorld(t, func(t *testing.T, w *world) {
		deadline := w.now() + 30_000
		if _, err := w.srv.Enqueue(ctx, siteserver.EnqueueInput{ID: "job-d", Kind: protocol.KindGenerate,
			Payload: json.RawMessage(`{"prompt":"hi"}`), Owner: "bob", DeadlineAt: deadline}); err != nil {
			t.Fatal(err)
		}
		caps := `[{"kind":"llm.generate","service":"s","backendId":"ollama","backendClass":"http","model":"m","offerScope":"private"}]`
		resp := w.call("claim", &w.bob, fmt.Sprintf(`{"protocolVersion":"2","runnerId":%q,"capabilities":%s,"max":1}`, w.bob.runnerID, caps))
		var claimed protocol.ClaimResponse
		if resp.Status != http.StatusOK || json.Unmarshal(resp.Body, &claimed) != nil || len(claimed.Jobs) != 1 {
			t.Fatalf("claim: %d %s", resp.Status, resp.Body)
		}
		lease := claimed.Jobs[0].Lease
		fetch := fmt.Sprintf(`{"protocolVersion":"2","runnerId":%q,"jobId":"job-d","leaseId":%q}`, w.bob.runnerID, lease.ID)
		heartbeat := fmt.Sprintf(`{"protocolVersion":"2","runnerId":%q,"daemonVersion":"0.1.1","capabilities":%s,"activeLeases":[{"jobId":"job-d","leaseId":%q}]}`,
			w.bob.runnerID, caps, lease.ID)
		if resp := w.call("fetch", &w.bob, fetch); resp.Status != http.StatusOK {
			t.Fatalf("fetch in time: %d %s", resp.Status, resp.Body)
		}
		for w.now()+20_000 < deadline {
			w.clock.Advance(20 * time.Second)
			var hb struct{ Lost []protocol.GrantRef }
			if resp := w.call("heartbeat", &w.bob, heartbeat); resp.Status != http.StatusOK || json.Unmarshal(resp.Body, &hb) != nil || len(hb.Lost) != 0 {
				t.Fatalf("heartbeat in time: %d %s", resp.Status, resp.Body)
			}
		}
		w.clock.Advance(time.Duration(deadline-w.now()) * time.Millisecond)

		assertRefusal(t, w.call("fetch", &w.bob, fetch), http.StatusNotFound, protocol.CodeNotFound)
		w.job.CreatedAt = w.now() // resultBody's envelope deadline; any will do
		late := w.resultBody(w.bob, "job-d", lease.ID, protocol.DispositionOK, protocol.OKOutcome("late"))
		assertRefusal(t, w.call("result", &w.bob, late), http.StatusNotFound, protocol.CodeNotFound)
		j, _, err := w.store.Get(ctx, "job-d")
		if err != nil || j.State != sitestore.StateExpired || j.Outcome != nil {
			t.Fatalf("after the late result: %+v %v", j, err)
		}
		var hb struct{ Lost []protocol.GrantRef }
		if resp := w.call("heartbeat", &w.bob, heartbeat); resp.Status != http.StatusOK || json.Unmarshal(resp.Body, &hb) != nil || len(hb.Lost) != 1 {
			t.Fatalf("heartbeat after the deadline: %d %s", resp.Status, resp.Body)
		}
	})
}
