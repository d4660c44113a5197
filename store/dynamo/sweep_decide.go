package dynamo

import (
	"context"
	"errors"
	"fmt"

	"github.com/byorelay/byorelay/store"
)

type sweepDid int

const (
	didNothing sweepDid = iota
	didRequeue
	didRemove
	// didExpire: a finished job past its end reached through a stale due
	// entry, made a tombstone (its result goes). Not reported: it
	// finished, nothing was lost.
	didExpire
)

type sweepResult struct {
	did   sweepDid
	seq   string
	job   store.Job
	churn *store.UnsealedChurn
}

// sweepJob decides one due job and writes the decision.
func (s *Store) sweepJob(ctx context.Context, pk string, now int64) (sweepResult, error) {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		av, err := s.getRaw(ctx, pk, skJob)
		if err != nil || av == nil {
			return sweepResult{}, err
		}
		j, err := unmarshalJob(av)
		if err != nil || j.Gone {
			return sweepResult{}, err
		}
		d, write, err := s.planSweep(ctx, pk, j, now)
		if err != nil || !write {
			return sweepResult{}, err
		}
		if d.did == didRemove || d.did == didExpire {
			if err := s.loadEnvelopes(ctx, d.left); errors.Is(err, errEnvelopeGone) {
				continue // changed since it was read: decide on what it is now
			} else if err != nil && !errors.Is(err, ErrNoBucket) {
				return sweepResult{}, err
			}
		}
		out, _, err := s.commit(ctx, d.w)
		if err != nil {
			return sweepResult{}, err
		}
		if out != committed {
			continue
		}
		if d.did == didNothing {
			return sweepResult{}, nil
		}
		s.dropSwept(ctx, pk, j, d, now)
		job, err := d.left.job()
		if err != nil {
			return sweepResult{}, err
		}
		return sweepResult{did: d.did, seq: j.Seq, job: job, churn: d.churn}, nil
	}
	return sweepResult{}, fmt.Errorf("sweep %q: %w", pk, ErrContention)
}

// sweepDecision is what a sweep decided for one job.
type sweepDecision struct {
	w   jobWrite
	did sweepDid
	// churn is the unsealed-churn report the write carries, if any.
	churn *store.UnsealedChurn
	// left is the job as the decision leaves it: what is reported.
	left *jobItem
	// drop are the objects deleted once the write committed.
	drop []string
}

// planSweep is what a sweep writes for one due job, by the sweep rule
// (store.DecideSweep); false when it writes nothing.
func (s *Store) planSweep(ctx context.Context, pk string, j *jobItem, now int64) (sweepDecision, bool, error) {
	d := sweepDecision{w: jobWrite{pk: pk, ver: j.Ver, unsealed: unsealed(j)}}
	// A finished job is listed to a collect for the grace past its
	// deadline (store.ResultGraceMs); its end hook brings the sweep back
	// to delete it after that (endJob). A sweep reaches one only through
	// a due entry read before the result's write moved it off the due
	// index (a result accepted just before the deadline, written as the
	// sweep ran): it must not take the result the relay just accepted.
	if j.State == string(store.StateDone) && j.Deadline+store.ResultGraceMs > now {
		return sweepDecision{}, false, nil
	}
	switch verdict := store.DecideSweep(j.sweepFacts(), now); verdict {
	case store.SweepExpire, store.SweepRemove:
		// Its item overwritten by a tombstone that keeps no ciphertext
		// (TTL collects it), its payload item and objects deleted after
		// the write.
		d.w.put = j.tombstone()
		d.did = didRemove
		if verdict == store.SweepExpire {
			d.did = didExpire
		}
		d.left, d.drop = j, []string{j.PayloadS3, j.ResultS3}

	case store.SweepReofferUnsealed, store.SweepEvict:
		if err := s.decideUnsealed(ctx, j, now, verdict == store.SweepEvict, &d); err != nil {
			return sweepDecision{}, false, err
		}

	case store.SweepRequeueLapsed:
		next := *j
		next.requeue()
		d.w.put = &next
		d.did, d.left, d.drop = didRequeue, &next, []string{j.PayloadS3}

	default:
		if j.DU > now {
			// The index lagged a change that moved the due time.
			return sweepDecision{}, false, nil
		}
		// Due early: a sealed grant keeps its earlier due time until a
		// sweep reaches it (jobItem.index). Now write the real one.
		next := *j
		next.DU = 0
		d.w.put, d.w.unsealed = &next, nil
	}
	return d, true, nil
}

// sweepFacts is what the sweep's rule (store.DecideSweep) reads of j.
func (j *jobItem) sweepFacts() store.SweepFacts {
	return store.SweepFacts{
		State: store.State(j.State), DeadlineAt: j.Deadline, AwaitingUntil: j.AwaitingUntil,
		Claimed: j.claimed(), LeaseExpiresAt: j.LeaseExp, SealAttempts: j.SealAttempts,
	}
}

// decideUnsealed writes the rule's verdict on a job whose site never
// sealed the grant: requeued for the same device, or, with evict, removed
// with a notice to the site. Either way the pair's churn is noted.
func (s *Store) decideUnsealed(ctx context.Context, j *jobItem, now int64, evict bool, d *sweepDecision) error {
	next := *j
	if s.onChurn != nil {
		item, c, err := s.noteChurn(ctx, j.Site, j.Owner, now)
		if err != nil {
			return err
		}
		d.w.extra = append(d.w.extra, item)
		d.churn = c
	}
	// Set before the requeue clears the holder.
	if next.ReofferTo == "" {
		next.ReofferTo = j.Runner
	}
	if !evict {
		next.SealAttempts = j.SealAttempts + 1
		next.requeue()
		d.w.put = &next
		d.did, d.left = didRequeue, &next
		return nil
	}
	d.w.put = j.tombstone()
	d.did, d.left, d.drop = didRemove, &next, []string{j.PayloadS3, j.ResultS3}
	// In the same transaction as the delete: an eviction the
	// site is never told of is a job lost without a word.
	notice, err := s.evictionNotice(j)
	if err != nil {
		return err
	}
	d.w.extra = append(d.w.extra, notice)
	return nil
}

// dropSwept deletes what a swept job leaves behind, in the same pass as
// the write that dropped it: a removed job's payload item and objects hold
// ciphertext nobody may read any more. What fails here is still named by
// the job's end hooks (its payload item, its end item), which the end
// sweep retries.
func (s *Store) dropSwept(ctx context.Context, pk string, j *jobItem, d sweepDecision, now int64) {
	ctx = context.WithoutCancel(ctx)
	s.dropObjects(ctx, d.drop...)
	s.dropPayloadItem(ctx, j)
	if d.did != didRequeue && j.claimed() {
		// The end item goes too, with what it names: the objects (any
		// a failed delete or a seal that lost its race left to it
		// included) and the frames of every stream the job's grants
		// wrote. A job removed unclaimed holds none of them; what an
		// earlier grant left waits for its hooks' due time.
		s.dropHooks(ctx, pk, j.Deadline, now, false)
	}
}
