package siteserver

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"net/http"
	"time"

	site "github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// The cloud lane (@byollm/server's CloudLane): the same
// app, with daemons reached through a relay. The site publishes each job's
// stub and nothing else; client/site is the transport (publish, pending,
// seal, collect, cancel) and the site job store is its ledger, so every
// step the relay cannot take back is written down first:
//
//   - a job is created in the store, marked AwaitingPublish, before its
//     stub is posted; a restarted site posts again what the relay never
//     accepted (enqueue is idempotent per site and id);
//   - the relay's lease is adopted and the device recorded (SealTo) before
//     the payload sealed to that device is posted, so a result from it is
//     accepted after a restart;
//   - a result is opened, verified against a device the job was sealed to,
//     and completed once; a result re-listed for a finished job is only
//     collected;
//   - an eviction notice ends the job (error, EndReason);
//   - a job never sealed to a device expires at its deadline through the
//     store's sweep, as any job's; one sealed to a device may have a result
//     the relay accepted in the deadline's last instant, so it expires once
//     client/site says a results poll sent late enough came back without
//     it (Expire, the store's ExpireDueBefore), or once the relay's grace
//     has passed (sitestore's expiryCut decides both).

// CloudLane configures the cloud lane: set Config.Cloud and the server
// publishes to a relay instead of serving daemons itself.
type CloudLane struct {
	// RelayURL is the relay's origin, e.g. "https://relay.example".
	RelayURL string
	// SiteID is this site's id at the relay.
	SiteID string
	// HTTPClient defaults to client/site's (30 s timeout, no redirects).
	HTTPClient *http.Client
}

// Lanes, as Lane reports them.
const (
	LaneDirect = "direct"
	LaneCloud  = "cloud"
)

// ErrCloudLane is the refusal of what only the direct lane can answer
// (runner availability: the relay, not the site, knows who is online; the
// reference throws). The app API answers it 400.
var ErrCloudLane = errors.New("siteserver: not available on the cloud lane (the relay, not this site, knows its runners)")

// errDirectLane is the refusal of the cloud lane's pump on a direct server.
var errDirectLane = errors.New("siteserver: Pump and Run are the cloud lane's; this server serves daemons directly")

// Lane is LaneDirect or LaneCloud.
func (s *Server) Lane() string {
	if s.cloud != nil {
		return LaneCloud
	}
	return LaneDirect
}

func newCloudClient(s *Server, lane CloudLane) (*site.Client, error) {
	if lane.RelayURL == "" || lane.SiteID == "" {
		return nil, errors.New("siteserver: Config.Cloud needs RelayURL and SiteID")
	}
	ledger := &storeLedger{store: s.store, siteKeyID: s.siteKeyID, log: s.log, answers: s.answers}
	c, err := site.New(site.Config{
		RelayURL:   lane.RelayURL,
		SiteID:     lane.SiteID,
		Keys:       s.keys,
		HTTPClient: lane.HTTPClient,
		// One clock: request timestamps, stub deadlines and the at-rest
		// envelope's createdAt all read the store's.
		Clock:         storeClock{s.store},
		Ledger:        ledger,
		OnStreamFault: s.streamFault,
	})
	if err != nil {
		return nil, err
	}
	ledger.withdraw = c.Cancel
	return c, nil
}

// Pump is one cycle of the cloud lane: publish what the relay has not
// accepted, seal for every claim, collect every finished job's fate. Its
// report lists what this process did; the store holds every job's one end.
func (s *Server) Pump(ctx context.Context) (site.Report, error) {
	if s.cloud == nil {
		return site.Report{}, errDirectLane
	}
	rep, err := s.cloud.Pump(ctx)
	s.noteWaiting(ctx)
	return rep, err
}

// Run pumps both halves of the cloud lane on independent loops until ctx
// ends (site.Client.Run), and warns in the log about a streaming job no
// device that streams has claimed (noteWaiting), on the same interval.
func (s *Server) Run(ctx context.Context, every time.Duration, deliver func(site.Report)) error {
	if s.cloud == nil {
		return errDirectLane
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	noted := make(chan struct{})
	go func() {
		defer close(noted)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.noteWaiting(ctx)
			}
		}
	}()
	err := s.cloud.Run(ctx, every, deliver)
	stop()
	<-noted
	return err
}

// enqueueCloud publishes a validated job. The store has it before the relay
// hears of it; if the relay cannot be reached the job stays AwaitingPublish
// and the pump publishes it, so the caller has a job either way. Only a
// relay that refuses the stub outright is an error (the job ends, error,
// with the relay's reason).
//
// A job with dependencies or a roster is only stored here (holdCloud): the
// pump publishes it once the store lists it as unpublished, which a
// dependent is only once every dependency completed ok.
func (s *Server) enqueueCloud(ctx context.Context, id string, in EnqueueInput, payload protocol.JobPayload) (sitestore.Job, error) {
	if in.Audience != "" && in.Audience != protocol.AudienceTeam {
		// The reference refuses an explicit audience on this lane: the
		// relay's routes decide who may run it.
		return sitestore.Job{}, invalid("the cloud lane publishes every job to the team (the relay's routes decide who runs it); do not name an audience")
	}
	now, err := s.store.Now(ctx)
	if err != nil {
		return sitestore.Job{}, err
	}
	if len(in.DependsOn) > 0 || len(in.AudienceAllow) > 0 {
		return s.holdCloud(ctx, id, in, payload, now)
	}
	deadline := in.DeadlineAt
	if deadline == 0 {
		ttl := in.TTLMs
		if ttl == 0 {
			ttl = sitestore.DefaultTTLMs
		}
		deadline = now + ttl
	}
	if deadline <= now {
		return sitestore.Job{}, invalid("deadlineAt must be in the future")
	}
	stub := protocol.JobStub{ID: id, Kind: in.Kind, Owner: in.Owner, Site: s.siteKeyID, Audience: protocol.AudienceTeam,
		Purpose: in.Purpose, SizeClass: protocol.SizeClassOf(payload.TextLength()), Streaming: in.Streaming, DeadlineAt: deadline}
	_, perr := s.cloud.Publish(ctx, stub, payload)
	var refused *site.EnqueueRefused
	switch {
	case errors.As(perr, &refused):
		return sitestore.Job{}, perr
	case perr != nil && !site.IsRetryable(perr):
		return sitestore.Job{}, perr
	}
	j, found, err := s.store.Get(ctx, id)
	if err != nil {
		return sitestore.Job{}, err
	}
	if !found {
		// Tracking failed before the store had it.
		return sitestore.Job{}, errors.Join(perr, errors.New("siteserver: the job was not stored"))
	}
	s.watchStreaming(j)
	return j, nil
}

// holdCloud stores a cloud-lane job for the pump to publish (Republish
// posts what the store lists in Unpublished), sealed at rest as Publish
// seals it. Its deadline follows the direct lane's rule: an absolute
// deadlineAt holds from now; a TTL alone starts once nothing blocks the
// job (sitestore.DeadlineFor), so a dependent is not spent waiting on a
// slow dependency, and its stub carries the deadline that gives. A job
// whose dependency never completes ok is never published: it waits, as
// on the direct lane, until its deadline expires it (Waiting says why).
func (s *Server) holdCloud(ctx context.Context, id string, in EnqueueInput, payload protocol.JobPayload, now int64) (sitestore.Job, error) {
	if in.DeadlineAt != 0 && in.DeadlineAt <= now {
		return sitestore.Job{}, invalid("deadlineAt must be in the future")
	}
	plaintext, err := payload.Plaintext()
	if err != nil {
		return sitestore.Job{}, invalid("invalid %s payload: %v", in.Kind, err)
	}
	env, err := s.sealAtRest(id, plaintext, now)
	if err != nil {
		return sitestore.Job{}, err
	}
	j, err := s.store.Create(ctx, sitestore.CreateInput{
		ID: id, Kind: in.Kind, Envelope: env, SizeClass: protocol.SizeClassOf(payload.TextLength()),
		Audience: protocol.AudienceTeam, Purpose: in.Purpose, Owner: in.Owner,
		AudienceAllow: in.AudienceAllow, DependsOn: in.DependsOn, TTLMs: in.TTLMs, DeadlineAt: in.DeadlineAt,
		AwaitingPublish: true, Streaming: in.Streaming,
	})
	if err != nil {
		return sitestore.Job{}, err
	}
	s.watchStreaming(j)
	return j, nil
}

// storeClock is the store clock as client/site reads one.
type storeClock struct{ store sitestore.Store }

func (c storeClock) Now() time.Time {
	ms, err := c.store.Now(context.Background())
	if err != nil {
		return time.Now()
	}
	return time.UnixMilli(ms)
}

// storeLedger keeps client/site's jobs in the site job store.
type storeLedger struct {
	store     sitestore.Store
	siteKeyID string
	log       *slog.Logger
	// withdraw cancels a job at the relay (site.Client.Cancel), for a job
	// this ledger ended while a device waits on its claim.
	withdraw func(ctx context.Context, jobID string) (bool, error)
	// answers seals a verified result before the store keeps it and opens
	// it for Lookup (answer.go).
	answers answers
}

// stubOf is the stub the relay was (or will be) sent. Its deadline is the
// store's rule: a job published at once has an absolute one; a held job
// with a TTL alone gets ClaimableAt + TTL once unblocked, which is when it
// is first published.
func (l *storeLedger) stubOf(j sitestore.Job) protocol.JobStub {
	return protocol.JobStub{ID: j.ID, Kind: j.Kind, Owner: j.Owner, Site: l.siteKeyID, Audience: j.Audience,
		Purpose: j.Purpose, SizeClass: j.SizeClass, Streaming: j.Streaming, DeadlineAt: sitestore.DeadlineFor(j, j.CreatedAt)}
}

func (l *storeLedger) trackedOf(j sitestore.Job) site.Tracked {
	return site.Tracked{Stub: l.stubOf(j), AtRest: j.Envelope, CreatedAt: j.CreatedAt, Published: !j.AwaitingPublish,
		Cancelled: j.State == sitestore.StateCanceled || j.CancelRequested, Ended: FateOf(j), SealedTo: j.SealedTo,
		Stream: streamOf(j), Result: resultOf(j)}
}

// resultOf is a verified job's outcome, nil for every other fate.
func resultOf(j sitestore.Job) *protocol.Outcome {
	if FateOf(j) != site.FateVerified || j.Outcome == nil {
		return nil
	}
	o := *j.Outcome
	return &o
}

// PutCheckpoint keeps client/site's durable checkpoint in the site store.
func (l *storeLedger) PutCheckpoint(ctx context.Context, jobID, leaseID string, seq int64, sealed protocol.SealedEnvelope) (bool, error) {
	return l.store.PutCheckpoint(ctx, jobID, leaseID, sitestore.Checkpoint{Seq: seq, Envelope: sealed})
}

// Checkpoint reads it back.
func (l *storeLedger) Checkpoint(ctx context.Context, jobID, leaseID string) (int64, protocol.SealedEnvelope, bool, error) {
	cp, ok, err := l.store.Checkpoint(ctx, jobID, leaseID)
	return cp.Seq, cp.Envelope, ok, err
}

func streamOf(j sitestore.Job) *site.StreamGrant {
	if j.StreamGrant == nil {
		return nil
	}
	return &site.StreamGrant{LeaseID: j.StreamGrant.LeaseID, Device: j.StreamGrant.Device}
}

// FateOf is how a cloud-lane job ended, "" while it is live: verified (a
// device's signed result, whatever its outcome), failed (a result this
// site refused, or a stub the relay refused), cancelled, expired, evicted.
func FateOf(j sitestore.Job) site.Fate {
	switch {
	case j.State == sitestore.StateExpired:
		return site.FateExpired
	case !j.Terminal():
		return ""
	case j.Provenance != nil:
		return site.FateVerified
	case j.State == sitestore.StateCanceled:
		return site.FateCancelled
	case j.Outcome != nil && j.Outcome.Code == codeEvicted:
		return site.FateEvicted
	}
	return site.FateFailed
}

// Outcome codes of the ends the site records itself.
const (
	codeEvicted        = "evicted"
	codeResultRefused  = "result-refused"
	codeEnqueueRefused = "enqueue-refused"
	// codeAudienceRefused: a device the job's roster does not name claimed
	// it (AdmitsDevice).
	codeAudienceRefused = "audience-refused"
)

func (l *storeLedger) Track(ctx context.Context, t site.Tracked) error {
	j, err := l.store.Create(ctx, sitestore.CreateInput{
		ID: t.Stub.ID, Kind: t.Stub.Kind, Envelope: t.AtRest, SizeClass: t.Stub.SizeClass, Audience: t.Stub.Audience,
		Purpose: t.Stub.Purpose, Owner: t.Stub.Owner, TTLMs: t.Stub.DeadlineAt - t.CreatedAt, DeadlineAt: t.Stub.DeadlineAt,
		AwaitingPublish: true, Streaming: t.Stub.Streaming,
	})
	if err != nil {
		return err
	}
	// Create is idempotent by id: an existing job answers unchanged.
	if l.stubOf(j) != t.Stub {
		return invalid("job %s already exists with a different stub", t.Stub.ID)
	}
	if FateOf(j) != "" {
		return invalid("job %s already ended (%s); a job id is used once", t.Stub.ID, FateOf(j))
	}
	return nil
}

func (l *storeLedger) Untrack(ctx context.Context, jobID, reason string) error {
	_, _, err := l.store.End(ctx, sitestore.EndInput{JobID: jobID, Outcome: protocol.FailedOutcome(codeEnqueueRefused, reason, false), Reason: reason})
	return err
}

func (l *storeLedger) Published(ctx context.Context, jobID string) error {
	_, _, err := l.store.MarkPublished(ctx, jobID)
	return err
}

func (l *storeLedger) Unpublished(ctx context.Context) ([]site.Tracked, error) {
	jobs, err := l.store.Unpublished(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]site.Tracked, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, l.trackedOf(j))
	}
	return out, nil
}

func (l *storeLedger) Lookup(ctx context.Context, jobID string) (site.Tracked, bool, error) {
	j, found, err := l.store.Get(ctx, jobID)
	if err != nil || !found {
		return site.Tracked{}, false, err
	}
	if j, err = l.answers.open(j); err != nil {
		return site.Tracked{}, false, err
	}
	return l.trackedOf(j), true, nil
}

func (l *storeLedger) Sealing(ctx context.Context, claim protocol.SitePendingJob) (string, error) {
	j, sealed, err := l.store.SealTo(ctx, sitestore.SealToInput{JobID: claim.JobID, LeaseID: claim.LeaseID,
		ExpiresAt: claim.LeaseExpiresAt, Device: *claim.Device, RunnerID: claim.RunnerID})
	if err != nil || sealed {
		return "", err
	}
	if j.ID == "" {
		return "not a job of this site's store; not sealing it", nil
	}
	if fate := FateOf(j); fate != "" {
		return "already ended here (" + string(fate) + "); not sealing it again", nil
	}
	if j.CancelRequested {
		return "cancelled here; not sealing it to anybody", nil
	}
	if now, err := l.store.Now(ctx); err == nil && sitestore.DeadlineFor(j, now) <= now {
		return "its deadline has passed here; not sealing it", nil
	}
	if !sitestore.AdmitsDevice(j, claim.RunnerID, *claim.Device) {
		// The relay re-offers a claim this site leaves unsealed to the same
		// device only, then evicts the job: no other device can get it. So
		// the job ends here, now, saying why, rather than 30 s later as an
		// eviction (docs/decisions/0022-cloud-lane-jobs.md).
		reason := "claimed by runner " + claim.RunnerID + ", whose device the job's audienceAllow does not name; " +
			"the relay offers a declined claim to no other device, so it cannot run"
		if _, _, err := l.store.End(ctx, sitestore.EndInput{JobID: j.ID,
			Outcome: protocol.FailedOutcome(codeAudienceRefused, reason, false), Reason: reason}); err != nil {
			return "", err
		}
		// Withdrawn at the relay too, so the device stops waiting for a
		// payload that will not come. A withdrawal that fails costs only
		// that: the relay evicts the job after its re-offers lapse.
		if _, err := l.withdraw(ctx, j.ID); err != nil {
			l.log.LogAttrs(ctx, slog.LevelWarn, "withdrawing a job at the relay failed",
				slog.String("job", j.ID), slog.String("error", err.Error()))
		}
		return "not sealing it: " + reason, nil
	}
	return "the job is " + j.State + " here; not sealing it", nil
}

func (l *storeLedger) Cancelling(ctx context.Context, jobID string) error {
	_, _, err := l.store.Cancel(ctx, jobID)
	return err
}

func (l *storeLedger) End(ctx context.Context, e site.Ending) (bool, error) {
	switch e.Fate {
	case site.FateVerified:
		r := e.Result
		now, err := l.store.Now(ctx)
		if err != nil {
			return false, err
		}
		disposition, answer, err := l.answers.seal(e.JobID, r.Outcome, now)
		if err != nil {
			return false, err
		}
		res, err := l.store.Complete(ctx, sitestore.CompleteInput{
			JobID:    e.JobID,
			RunnerID: r.RunnerID,
			Holder:   sitestore.HolderByDevice(r.Device, r.LeaseID),
			Outcome:  disposition,
			Answer:   answer,
			// From the job, the relay's routing word and what the device
			// signed; Untrusted is derived, never taken from the device.
			Provenance: sitestore.Provenance{Audience: r.Audience, RunnerID: r.RunnerID, RunnerOwner: r.RunnerOwner,
				BackendClass: r.Ran.BackendClass, Model: r.Ran.Model, Untrusted: r.Untrusted,
				Stop: r.Ran.Stop, StopReported: r.Ran.StopReported},
		})
		return res.Accepted, err
	case site.FateFailed:
		return l.end(ctx, e.JobID, protocol.FailedOutcome(codeResultRefused, e.Reason, false), e.Reason)
	case site.FateEvicted:
		return l.end(ctx, e.JobID, protocol.FailedOutcome(codeEvicted, e.Reason, true), e.Reason)
	case site.FateCancelled:
		return l.end(ctx, e.JobID, protocol.CanceledOutcome(), e.Reason)
	}
	// Expiry is the store's sweep (Expire), never an ending handed in.
	return false, nil
}

func (l *storeLedger) end(ctx context.Context, jobID string, o protocol.Outcome, reason string) (bool, error) {
	_, ended, err := l.store.End(ctx, sitestore.EndInput{JobID: jobID, Outcome: o, Reason: reason})
	return ended, err
}

// Expire is the store's sweep with client/site's word on jobs sealed to a
// device: before is the instant up to which a deadline has passed here,
// read on the store's clock (storeClock).
func (l *storeLedger) Expire(ctx context.Context, before int64) ([]site.Ending, error) {
	changed, err := l.store.ExpireDueBefore(ctx, before)
	if err != nil {
		return nil, err
	}
	var out []site.Ending
	for _, j := range changed {
		if j.State == sitestore.StateExpired {
			out = append(out, site.Ending{JobID: j.ID, Fate: site.FateExpired, Reason: "its deadline passed with no result"})
		}
	}
	return out, nil
}

// errNoStreamDirect is Stream on a direct server: its daemons answer it
// directly, with no relay stream lane between.
var errNoStreamDirect = errors.New("siteserver: live streams are the cloud lane's; this server serves daemons directly")

// Stream reads a cloud-lane job's live stream through the relay
// (site.Client.Stream). The stream is keyed to the grant SealTo wrote to
// the store, so any process on the same store reads it, whichever sealed
// the job; on the direct lane there is no relay stream to read.
func (s *Server) Stream(ctx context.Context, jobID string) iter.Seq2[string, error] {
	if s.cloud == nil {
		return func(yield func(string, error) bool) { yield("", errNoStreamDirect) }
	}
	return s.cloud.Stream(ctx, jobID)
}

// StreamHandler re-serves a cloud-lane job's live stream to a browser
// (site.Client.StreamHandler): authorize is required and runs first, and
// any process on the store serves any of its jobs.
func (s *Server) StreamHandler(authorize site.Authorize) (http.Handler, error) {
	if s.cloud == nil {
		return nil, errNoStreamDirect
	}
	return s.cloud.StreamHandler(authorize)
}
