package dynamo

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// jobItem is a job as stored. Every write replaces the whole item under the
// condition that ver is what was read, so each transition carries its own
// decision: if anything changed in between, the write fails and the caller
// decides again on what is there now. A Put costs the same capacity as an
// Update (both are billed on the larger of the old and new item), so the
// whole-item write buys simplicity for nothing.
type jobItem struct {
	PK string `dynamodbav:"pk"`
	SK string `dynamodbav:"sk"`
	// Site and JobID are the key's parts (jobPK), read from it rather than
	// stored beside it: every write of the job is billed for its bytes.
	Site  string `dynamodbav:"-"`
	JobID string `dynamodbav:"-"`
	// Stub is the JobStub as JSON, checked against the schema at claim.
	Stub string `dynamodbav:"stub"`
	// Owner and Kind repeat the stub's, so keys can be derived even when a
	// stored stub no longer decodes.
	Owner    string `dynamodbav:"owner"`
	Kind     string `dynamodbav:"kind"`
	Audience string `dynamodbav:"aud"`
	Deadline int64  `dynamodbav:"dl"`
	State    string `dynamodbav:"st"`
	// Ver is the optimistic-concurrency version every write is conditioned on.
	Ver int64 `dynamodbav:"ver"`
	// WID names the write that produced this version, so a caller whose
	// write's answer was lost can tell by reading whether it committed.
	WID string `dynamodbav:"wid"`
	// SealMark, DoneMark and ReleaseMark are ids the last seal, completion
	// and release wrote (newMark). Every later write copies the item, so
	// keeps them: after an ambiguous error, a write that a fetch, a renewal
	// or a claim wrote over before its read-back is still recognised as its
	// own (commit). The next write of the same kind replaces the mark; a
	// tombstone drops them.
	SealMark    string `dynamodbav:"sm,omitempty"`
	DoneMark    string `dynamodbav:"dm,omitempty"`
	ReleaseMark string `dynamodbav:"rm,omitempty"`
	// Seq is enqueue order: store clock, then a per-instance counter.
	Seq string `dynamodbav:"seq"`
	TTL int64  `dynamodbav:"ttl"`

	Runner string `dynamodbav:"cr,omitempty"`
	HOwner string `dynamodbav:"co,omitempty"`
	// Device is the holder's identity as JSON, or as DeviceB's bytes when
	// it packs (compact.go).
	Device   string `dynamodbav:"cd,omitempty"`
	DeviceB  []byte `dynamodbav:"cdB,omitempty"`
	Lease    string `dynamodbav:"cl,omitempty"`
	LeaseExp int64  `dynamodbav:"ce,omitempty"`

	AwaitingUntil int64            `dynamodbav:"au,omitempty"`
	SealAttempts  int              `dynamodbav:"sa,omitempty"`
	ReofferTo     string           `dynamodbav:"reofferTo,omitempty"`
	RefusedBy     []string         `dynamodbav:"refusedBy,omitempty"`
	RetryAfter    map[string]int64 `dynamodbav:"retryAfter,omitempty"`
	Cancelled     bool             `dynamodbav:"cx,omitempty"`
	// Collected: the site has this done job's fate and it leaves the list.
	Collected bool `dynamodbav:"col,omitempty"`
	// Gone marks a removed job: what a sweep leaves instead of deleting
	// the item, so the write that removed it carries a wid like every other
	// (see commit). Every read treats it as absent; TTL collects it.
	Gone bool `dynamodbav:"gone,omitempty"`

	// Envelopes are JSON, inline, or the sort key of the payload's own item
	// (envelope.go), or a pointer to an S3 object.
	Payload     string `dynamodbav:"pl,omitempty"`
	PayloadItem string `dynamodbav:"plI,omitempty"`
	PayloadS3   string `dynamodbav:"plS3,omitempty"`
	Result      string `dynamodbav:"rs,omitempty"`
	// ResultC is the inline result's ciphertext as bytes when it packs
	// (compact.go); Result then holds the other fields.
	ResultC     []byte `dynamodbav:"rsC,omitempty"`
	ResultS3    string `dynamodbav:"rsS3,omitempty"`
	Disposition string `dynamodbav:"dp,omitempty"`
	// DoneAt is when the result was accepted (epoch ms): the job's place
	// on its site's finished list.
	DoneAt int64 `dynamodbav:"dn,omitempty"`

	// Index attributes, derived from the state by index() before each write.
	QK string `dynamodbav:"qk,omitempty"`
	DK string `dynamodbav:"dk,omitempty"`
	DU int64  `dynamodbav:"du,omitempty"`

	// payload and result hold envelopes loaded from S3 (never stored).
	payload *protocol.SealedEnvelope `dynamodbav:"-"`
	result  *protocol.SealedEnvelope `dynamodbav:"-"`
}

// ttlGraceSeconds keeps TTL from collecting an unfinished job before the
// sweep does: TTL deletes without telling anyone, so a job it takes first
// would leave its unsealed slot behind, and nobody would hear that it was
// lost. A finished job has nothing to tell; the sweep deletes it at its end
// (doc.go, "When a job ends"), and its TTL is only the backstop. The
// sweep's repair of the unsealed set covers a job TTL took first anyway.
const ttlGraceSeconds = 24 * 60 * 60

// claimed reports whether the job has a holder.
func (j *jobItem) claimed() bool { return j.Lease != "" }

// index sets the index attributes from the state. Sparse indexes: a job is
// in the queue index only while queued or awaiting payload and not
// cancelled (an unsealed grant stays for the next claim to sweep once its
// window is over), and on its site's finished list only while done with a
// result the site has not collected. The site's awaiting list is its
// pairs' unsealed sets (Awaiting), not an index.
//
// The due time only ever moves later lazily: a sealed grant (ready or
// running) keeps a due time that is earlier than its next deadline instead
// of moving its due index entry (a delete and a put) on every lease
// renewal, and on a seal unless sealMovesDue says the move is cheaper (the
// seal then sets DU to 0). A sweep that reaches it early finds nothing due
// and writes the real due time then (sweepJob), which for most jobs never
// happens: they are done first. shards and finishedShards are the store's
// DueShards and FinishedShards.
func (j *jobItem) index(shards, finishedShards int) {
	stored := j.DU
	j.QK, j.DK, j.DU = "", "", 0
	j.TTL = j.Deadline/1000 + ttlGraceSeconds
	if j.Gone {
		return
	}
	switch store.State(j.State) {
	case store.StateQueued, store.StateAwaitingPayload:
		// A cancelled job can never be claimed, so it leaves the queue
		// instead of sitting at its head where every claim would read it.
		//
		// An unsealed grant stays in the partition it was claimed from
		// until its seal: when its awaiting window runs out, the next
		// claim that reads the partition finds it there and sweeps it
		// (Claim), as the reference's claim, which sweeps everything
		// first, would. The in-line sweep reads one due shard a request,
		// so waiting for the grant's due entry to be read would leave the
		// job out of every claim until its shard's turn. It costs the
		// claim's write an index update instead of an index delete, and
		// the seal an index delete; a pair has at most UnsealedPerPair
		// such jobs, which the claim's slack reads past.
		if !j.Cancelled {
			if j.ReofferTo != "" {
				j.QK = stickyQueueKey(j.ReofferTo)
			} else {
				j.QK = queueKey(j.Site, j.Owner, j.Kind, j.Audience == "private", j.streaming())
			}
		}
	case store.StateDone:
		// A finished job expires: from its deadline every read treats it
		// as gone (but a collect's, for store.ResultGraceMs), and after
		// that the sweep deletes it, brought back by its end hook (its
		// payload item or its end item), not by this item. Until then it
		// is on its site's finished list, a partition of the due index
		// sorted by when its result was accepted, so a results page reads
		// the newest with one Query a shard from a moment on (ResultsPage). A job
		// accepted before DoneAt was kept sorts first, as the oldest.
		j.TTL = (j.Deadline+store.ResultGraceMs)/1000 + 1
		if (j.Result != "" || j.ResultS3 != "") && !j.Collected {
			j.DK, j.DU = finishedKey(j.Site, finishedShard(j.JobID, finishedShards)), max(j.DoneAt, 1)
		}
		return
	}
	j.DK = dueKey(j.PK, shards)
	j.DU = j.nextDeadline()
	if (j.State == string(store.StateReady) || j.State == string(store.StateRunning)) && stored > 0 && stored < j.DU {
		j.DU = stored
	}
}

// sealMoveWithinMs: a seal that comes less than this before its grant's
// due entry falls due (the awaiting window's end) moves the entry to the
// job's real next deadline (sealMovesDue).
const sealMoveWithinMs = 2_000

// sealMovesDue decides, for the seal of j at now, whether the seal's write
// moves j's due entry to the sealed job's next deadline (its lease expiry,
// or its deadline) instead of leaving it at the awaiting window's end.
//
// Moving it costs the seal two index writes (the entry's delete and put;
// the seal writes the job anyway). Leaving it costs nothing if the job is
// done before the window ends, and otherwise a sweep's visit when it falls
// due: a consistent read of the job, a write of the whole item and the
// same two index writes, plus a place in an in-line sweep's bound. So the
// move is cheaper exactly when the job will still be running at the
// window's end, which the seal can tell in two cases:
//   - a live-stream job: it is streamed because its answer takes long to
//     generate, so it outlives a window that is seconds from its end;
//   - a seal less than sealMoveWithinMs before the window ends: the device
//     has still to fetch, run and report.
//
// Otherwise (a seal early in the window, the usual case) the job is
// usually done before the window ends and nothing is rewritten. Where the
// entry already sits at the sealed job's next deadline (a lease or a
// deadline that ends before the window) there is nothing to move.
func sealMovesDue(j *jobItem, now int64) bool {
	if j.streaming() {
		return true
	}
	return j.AwaitingUntil-now < sealMoveWithinMs
}

// lapsedGrant says whether j is a grant whose awaiting window or lease
// is over at now: a sweep reaching it would requeue it.
func (j *jobItem) lapsedGrant(now int64) bool {
	switch store.State(j.State) {
	case store.StateAwaitingPayload:
		return j.AwaitingUntil <= now
	case store.StateReady, store.StateRunning:
		return j.claimed() && j.LeaseExp <= now
	}
	return false
}

// tombstone is what is left of j once a sweep removed it: the keys, the
// deadline that sets its TTL, and nothing a read could return.
func (j *jobItem) tombstone() *jobItem {
	return &jobItem{PK: j.PK, SK: j.SK, Site: j.Site, JobID: j.JobID, Owner: j.Owner, Kind: j.Kind,
		Deadline: j.Deadline, State: "gone", Seq: j.Seq, Gone: true}
}

// nextDeadline is the earliest instant a sweep has something to do with
// this job.
func (j *jobItem) nextDeadline() int64 {
	due := j.Deadline
	switch store.State(j.State) {
	case store.StateAwaitingPayload:
		due = min(due, j.AwaitingUntil)
	case store.StateReady, store.StateRunning:
		if j.LeaseExp != 0 {
			due = min(due, j.LeaseExp)
		}
	}
	return due
}

func (j *jobItem) marshal() (map[string]types.AttributeValue, error) {
	av, err := attributevalue.MarshalMap(j)
	if err != nil {
		return nil, fmt.Errorf("encode job %q: %w", j.JobID, err)
	}
	return av, nil
}

func unmarshalJob(av map[string]types.AttributeValue) (*jobItem, error) {
	var j jobItem
	if err := attributevalue.UnmarshalMap(av, &j); err != nil {
		return nil, fmt.Errorf("decode job item: %w", err)
	}
	site, jobID, ok := strings.Cut(strings.TrimPrefix(j.PK, "J#"), "\x00")
	if !ok || !strings.HasPrefix(j.PK, "J#") {
		return nil, fmt.Errorf("decode job item: key %q names no job", j.PK)
	}
	j.Site, j.JobID = site, jobID
	return &j, nil
}

// stub decodes the stored stub strictly; false when it does not parse or
// does not name the job it is stored under.
func (j *jobItem) stub() (protocol.JobStub, bool) {
	var s protocol.JobStub
	// The protocol's strict decoder when the stub type validates itself,
	// so a stored stub is held to the schema the wire holds it to.
	if v, ok := any(&s).(protocol.Validator); ok {
		if err := protocol.DecodeStrict([]byte(j.Stub), v); err != nil {
			return protocol.JobStub{}, false
		}
	} else if err := json.Unmarshal([]byte(j.Stub), &s); err != nil {
		return protocol.JobStub{}, false
	}
	if s.ID == "" || s.Kind == "" || s.Owner == "" || s.Audience == "" || s.DeadlineAt <= 0 {
		return protocol.JobStub{}, false
	}
	return s, true
}

// streaming is the stub's streaming flag, read alone: the queue partition
// depends on it. A stub that does not decode says false, which the claim's
// full decode then leaves queued for an operator, as before.
func (j *jobItem) streaming() bool {
	var s struct {
		Streaming bool `json:"streaming"`
	}
	return json.Unmarshal([]byte(j.Stub), &s) == nil && s.Streaming
}

// job converts to the contract's Job. Envelopes must already be loaded
// (inline ones decode here; S3 ones were fetched into payload/result).
func (j *jobItem) job() (store.Job, error) {
	out := store.Job{
		ID:            j.JobID,
		SiteID:        j.Site,
		State:         store.State(j.State),
		AwaitingUntil: j.AwaitingUntil,
		SealAttempts:  j.SealAttempts,
		ReofferTo:     j.ReofferTo,
		RefusedBy:     append([]string{}, j.RefusedBy...),
		Cancelled:     j.Cancelled,
		Collected:     j.Collected,
		Disposition:   store.Disposition(j.Disposition),
		DoneAt:        j.DoneAt,
	}
	// A stub that no longer decodes is still listed, with its state, so an
	// operator can see it; its fields other than the key are left empty.
	if err := json.Unmarshal([]byte(j.Stub), &out.Stub); err != nil {
		out.Stub = protocol.JobStub{ID: j.JobID, Owner: j.Owner, Kind: j.Kind, DeadlineAt: j.Deadline}
	}
	if len(j.RetryAfter) > 0 {
		out.RetryAfter = map[string]int64{}
		for k, v := range j.RetryAfter {
			out.RetryAfter[k] = v
		}
	}
	if j.claimed() {
		h := &store.Holder{RunnerID: j.Runner, Owner: j.HOwner, LeaseID: j.Lease, LeaseExpiresAt: j.LeaseExp}
		if len(j.DeviceB) > 0 {
			d, err := unpackIdentity(j.DeviceB)
			if err != nil {
				return store.Job{}, fmt.Errorf("decode holder device of job %q: %w", j.JobID, err)
			}
			h.Device = d
		} else if err := json.Unmarshal([]byte(j.Device), &h.Device); err != nil {
			return store.Job{}, fmt.Errorf("decode holder device of job %q: %w", j.JobID, err)
		}
		out.ClaimedBy = h
	}
	var err error
	if out.Payload, err = inlineOr(j.Payload, nil, j.payload); err != nil {
		return store.Job{}, err
	}
	if out.Result, err = inlineOr(j.Result, j.ResultC, j.result); err != nil {
		return store.Job{}, err
	}
	return out, nil
}

func inlineOr(inline string, raw []byte, loaded *protocol.SealedEnvelope) (*protocol.SealedEnvelope, error) {
	if loaded != nil {
		e := *loaded
		return &e, nil
	}
	if inline == "" {
		return nil, nil
	}
	return unpackEnvelope(inline, raw)
}

// requeue returns the job to the queue, forgetting the claim. RefusedBy,
// RetryAfter, ReofferTo, SealAttempts and Cancelled survive: the requeue is
// the event they have to outlive.
func (j *jobItem) requeue() {
	j.State = string(store.StateQueued)
	j.Runner, j.HOwner, j.Device, j.DeviceB, j.Lease, j.LeaseExp = "", "", "", nil, "", 0
	j.AwaitingUntil = 0
	j.Payload, j.PayloadItem, j.PayloadS3, j.payload = "", "", "", nil
}
