package peers_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/localtest/peers"
	"github.com/byorelay/byorelay/protocol"
)

// goSite is the smallest site that can use a relay, written with the
// protocol package: publish a stub, seal the payload to whichever device
// claimed it, collect the sealed result and open it.
type goSite struct{ w *peers.World }

// publish enqueues a stub for owner's llm.generate job.
func (s goSite) publish(t *testing.T, jobID string) protocol.JobStub {
	t.Helper()
	stub := s.w.Site.Stub(jobID, owner, time.Now().Add(15*time.Minute).UnixMilli())
	var got struct {
		JobID string `json:"jobId"`
		State string `json:"state"`
	}
	call(t, s.w.Origin, s.w.Site.Request(t, "enqueue", time.Now(), protocol.EnqueueRequest{
		ProtocolVersion: pv(), SiteID: siteID, Stub: stub,
	}), &got)
	if got.JobID != jobID || got.State != "queued" {
		t.Fatalf("enqueue answered %+v", got)
	}
	return stub
}

// sealWhenClaimed waits for a device to claim jobID, then seals the
// prompt to that device, as the site's pump does.
func (s goSite) sealWhenClaimed(t *testing.T, jobID, prompt string) protocol.SitePendingJob {
	t.Helper()
	var claim protocol.SitePendingJob
	eventually(t, "a device to claim "+jobID, func() bool {
		var pending protocol.SitePendingResponse
		call(t, s.w.Origin, s.w.Site.Request(t, "pending", time.Now(), nil), &pending)
		for _, j := range pending.Jobs {
			if j.JobID == jobID {
				claim = j
				return true
			}
		}
		return false
	})
	if claim.Device == nil || !protocol.VerifyPublicIdentity(*claim.Device) {
		t.Fatalf("pending names no verifiable device: %+v", claim)
	}
	payload, err := json.Marshal(map[string]string{"prompt": prompt})
	if err != nil {
		t.Fatal(err)
	}
	envelope := s.w.Site.Seal(t, jobID, string(payload), *claim.Device, time.Now().UnixMilli()+protocol.EnvelopeMaxAgeMs)
	var sealed struct {
		JobID string `json:"jobId"`
		State string `json:"state"`
	}
	call(t, s.w.Origin, s.w.Site.Request(t, "payload", time.Now(), protocol.PayloadRequest{
		ProtocolVersion: pv(), SiteID: siteID, JobID: jobID, Envelope: envelope,
	}), &sealed)
	if sealed.State != "ready" {
		t.Fatalf("payload answered %+v", sealed)
	}
	return claim
}

// collect waits for jobID's result, then opens it and verifies it came
// from the device the relay names: the one party it cannot forge.
func (s goSite) collect(t *testing.T, jobID string) (protocol.SiteResult, sealedOutcome) {
	t.Helper()
	var res protocol.SiteResult
	eventually(t, "the result of "+jobID, func() bool {
		var results protocol.SiteResultsResponse
		call(t, s.w.Origin, s.w.Site.Request(t, "results", time.Now(), nil), &results)
		for _, j := range results.Jobs {
			if j.JobID == jobID {
				res = j
				return true
			}
		}
		return false
	})
	if res.Envelope == nil || res.Device == nil {
		t.Fatalf("result without envelope or device: %+v", res)
	}
	deviceKey, err := protocol.KeyID(res.Device.Identity)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := protocol.Open(*res.Envelope, s.w.Site.Keys, res.Device.Identity, protocol.ExpectedEnvelope{
		JobID: jobID, SenderKeyID: deviceKey, RecipientKeyID: s.w.Site.KeyID(), Direction: protocol.DirectionResult,
	})
	if err != nil {
		t.Fatalf("the sealed result does not open and verify at the site: %v", err)
	}
	var out sealedOutcome
	dec := json.NewDecoder(strings.NewReader(plain))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("sealed result %s: %v", plain, err)
	}
	return res, out
}
