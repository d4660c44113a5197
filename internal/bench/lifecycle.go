package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/byorelay/byorelay/protocol"
)

// The job's plaintexts: a small prompt and a small answer, so every
// envelope stays inline in its DynamoDB item (the cost model's "small job").
var (
	payloadText = strings.Repeat("Summarise the attached notes in two sentences. ", 6)
	resultText  = strings.Repeat("The notes describe a relay that routes sealed work. ", 10)
)

// claimRetries bounds how often a daemon asks again when a claim returns
// nothing: the job was just enqueued, so an empty answer is a lagging
// index (DynamoDB's GSI) or a bug, and either must show in the report.
const claimRetries = 50

// lifecycle runs one job through every endpoint, as the site and the
// device would, with real signatures and real sealed envelopes both ways:
// enqueue, claim, pending, payload (the site seals to the device pending
// names), fetch (the device opens and checks it), result (sealed back),
// results (the site opens and checks it). It records the whole job's
// latency under "job"; the client records each endpoint's.
func lifecycle(ctx context.Context, c *client, d daemon, s site, jobID string, deadline int64, tl *tally) error {
	start := time.Now()
	stub := s.stub(jobID, d.owner, deadline)
	if _, err := c.siteCall(ctx, s, "enqueue", protocol.EnqueueRequest{
		ProtocolVersion: protocol.ProtocolVersion, SiteID: s.id, Stub: stub,
	}); err != nil {
		return err
	}

	lease, err := claimJob(ctx, c, d, jobID, &tl.empties)
	if err != nil {
		return err
	}

	raw, err := c.siteCall(ctx, s, "pending", nil)
	if err != nil {
		return err
	}
	var pending protocol.SitePendingResponse
	if err := json.Unmarshal(raw, &pending); err != nil {
		return fmt.Errorf("pending: %w", err)
	}
	tl.pendingRows.add(int64(len(pending.Jobs)))
	var device *protocol.PublicIdentity
	for _, j := range pending.Jobs {
		if j.JobID == jobID && j.LeaseID == lease.ID {
			device = j.Device
		}
	}
	if device == nil || device.Identity != d.keys.Public().Identity {
		return fmt.Errorf("pending: job %s is not awaiting a payload for %s", jobID, d.runnerID)
	}
	deviceKeyID, err := protocol.KeyID(device.Identity)
	if err != nil {
		return fmt.Errorf("pending: %w", err)
	}
	payload, err := protocol.Seal(payloadText, s.keys, device.Encryption, protocol.EnvelopeContext{
		JobID: jobID, SenderKeyID: s.keys.KeyID(), RecipientKeyID: deviceKeyID,
		DeadlineAt: deadline, Direction: protocol.DirectionPayload,
	})
	if err != nil {
		return err
	}
	if _, err := c.siteCall(ctx, s, "payload", protocol.PayloadRequest{
		ProtocolVersion: protocol.ProtocolVersion, SiteID: s.id, JobID: jobID, Envelope: payload,
	}); err != nil {
		return err
	}

	raw, err = c.daemonCall(ctx, d, "fetch", protocol.FetchRequest{
		ProtocolVersion: protocol.ProtocolVersion, RunnerID: d.runnerID, JobID: jobID, LeaseID: lease.ID,
	})
	if err != nil {
		return err
	}
	var fetched protocol.FetchResponse
	if err := json.Unmarshal(raw, &fetched); err != nil {
		return fmt.Errorf("fetch: %w", err)
	}
	text, err := protocol.Open(fetched.Envelope, d.keys, s.keys.Public().Identity, protocol.ExpectedEnvelope{
		JobID: jobID, SenderKeyID: s.keys.KeyID(), RecipientKeyID: d.keys.KeyID(), Direction: protocol.DirectionPayload,
	})
	if err != nil || text != payloadText {
		return fmt.Errorf("fetch: the payload did not open as sealed: %v", err)
	}

	sealed, err := protocol.Seal(resultText, d.keys, s.keys.Public().Encryption, protocol.EnvelopeContext{
		JobID: jobID, SenderKeyID: d.keys.KeyID(), RecipientKeyID: s.keys.KeyID(),
		DeadlineAt: deadline, Direction: protocol.DirectionResult,
	})
	if err != nil {
		return err
	}
	raw, err = c.daemonCall(ctx, d, "result", protocol.ResultRequest{
		ProtocolVersion: protocol.ProtocolVersion, RunnerID: d.runnerID, JobID: jobID, LeaseID: lease.ID,
		Envelope: sealed, Disposition: protocol.DispositionOK,
	})
	if err != nil {
		return err
	}
	var accepted protocol.ResultResponse
	if err := json.Unmarshal(raw, &accepted); err != nil || !accepted.Accepted {
		return fmt.Errorf("result: not accepted: %s", raw)
	}

	// A results answer is a bounded page: like a real site, poll until the
	// job is listed.
	for poll := 0; ; poll++ {
		raw, err = c.siteCall(ctx, s, "results", nil)
		if err != nil {
			return err
		}
		tl.resultsRows.add(int64(bytes.Count(raw, []byte(`"jobId":`))))
		err = openResult(raw, s, d, jobID)
		if !errors.Is(err, errNotListed) || poll == resultsPolls-1 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err != nil {
		return err
	}
	c.times.add("job", time.Since(start))
	return nil
}

// claimJob claims until the daemon holds jobID. Each daemon's owner is its
// own and only its worker enqueues for it, so the job claimed is the one
// just enqueued or the relay routed wrongly.
func claimJob(ctx context.Context, c *client, d daemon, jobID string, empties *counter) (protocol.Lease, error) {
	req := protocol.ClaimRequest{
		ProtocolVersion: protocol.ProtocolVersion, RunnerID: d.runnerID,
		Capabilities: []protocol.Capability{capability}, Max: 1,
	}
	for range claimRetries {
		raw, err := c.daemonCall(ctx, d, "claim", req)
		if err != nil {
			return protocol.Lease{}, err
		}
		var claimed protocol.ClaimResponse
		if err := json.Unmarshal(raw, &claimed); err != nil {
			return protocol.Lease{}, fmt.Errorf("claim: %w", err)
		}
		for _, j := range claimed.Jobs {
			if j.ID != jobID {
				return protocol.Lease{}, fmt.Errorf("claim: %s was handed %s, not its own %s", d.runnerID, j.ID, jobID)
			}
			return j.Lease, nil
		}
		empties.add(1)
		select {
		case <-ctx.Done():
			return protocol.Lease{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return protocol.Lease{}, errors.New("claim: the job just enqueued was never offered")
}

// errNotListed is a results answer without the job; resultsPolls bounds
// how many answers a lifecycle reads before it fails so.
var errNotListed = errors.New("results: the job is not among the site's results")

const resultsPolls = 50

// openResult finds jobID in a results answer and opens its envelope as the
// site would, against the device the relay says ran it.
func openResult(raw []byte, s site, d daemon, jobID string) error {
	var results protocol.SiteResultsResponse
	if row, ok := resultRow(raw, jobID); ok {
		results.Jobs = []protocol.SiteResult{row}
	} else if err := json.Unmarshal(raw, &results); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	for _, r := range results.Jobs {
		if r.JobID != jobID || r.Envelope == nil || r.Device == nil {
			continue
		}
		text, err := protocol.Open(*r.Envelope, s.keys, r.Device.Identity, protocol.ExpectedEnvelope{
			JobID: jobID, SenderKeyID: d.keys.KeyID(), RecipientKeyID: s.keys.KeyID(), Direction: protocol.DirectionResult,
		})
		if err != nil || text != resultText {
			return fmt.Errorf("results: the result did not open as sealed: %v", err)
		}
		return nil
	}
	return fmt.Errorf("%w: job %s", errNotListed, jobID)
}

// resultRow decodes jobID's row alone from a results answer. The answer
// lists every result the site has not collected until its deadline (the
// reference's GET has no acknowledgement), hundreds of rows at this
// bench's rates, and decoding all of them for the one just finished was
// the driver's largest cost, on the same cores as the target it measures.
// Every target gets the same answer read the same way, so this changes no
// ratio's fairness, only how much of the machine the driver takes. The
// row is the object around the last "jobId":"<jobID>" in the answer (ids,
// keys and base64url ciphertext hold no braces, quotes or backslashes, so
// counting braces back to its start is exact here), decoded and checked to
// be jobID's; anything else falls back to decoding the whole answer. The
// search runs from the end because every target lists a site's results in
// the order the jobs were enqueued, so the job just finished is among the
// last rows: scanning the whole answer for it (and again for a second
// copy) was another tenth of the driver's CPU.
func resultRow(raw []byte, jobID string) (protocol.SiteResult, bool) {
	at := bytes.LastIndex(raw, []byte(`"jobId":"`+jobID+`"`))
	if at < 0 {
		return protocol.SiteResult{}, false
	}
	depth := 0
	for i := at - 1; i >= 0; i-- {
		switch raw[i] {
		case '}':
			depth++
		case '{':
			if depth == 0 {
				var row protocol.SiteResult
				if err := json.NewDecoder(bytes.NewReader(raw[i:])).Decode(&row); err != nil || row.JobID != jobID {
					return protocol.SiteResult{}, false
				}
				return row, true
			}
			depth--
		}
	}
	return protocol.SiteResult{}, false
}
