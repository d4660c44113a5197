package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The cloud lane's pump (internal/sitepump) keeps two things here: whether
// it has work (Work), and the one lease that makes it the only pump of the
// site (TakePumpLease and the rest). docs/decisions/0030-site-pump.md
// says why a lease item and not the function's concurrency alone.

// Work is what the cloud lane's pump has to do, read from the two sparse
// partitions of the group index.
type Work struct {
	// Unpublished is how many jobs wait to be published (NeedsPublish),
	// and OldestUnpublishedAt the creation time of the oldest, 0 if none.
	Unpublished         int
	OldestUnpublishedAt int64
	// InFlight says whether the relay holds at least one job of this site
	// that has not ended (sitestore.Job.InFlight).
	InFlight bool
}

// Idle reports whether the pump has nothing to do.
func (w Work) Idle() bool { return w.Unpublished == 0 && !w.InFlight }

// Work reads the pump's work: every unpublished job (a list the pump
// publishes from anyway) and the in-flight partition until its first job
// that is still in flight (the index lags the table: each copy is judged
// again). It reads no job item and nothing per job in flight but that
// page.
func (s *Store) Work(ctx context.Context) (Work, error) {
	var w Work
	unpublished, err := s.Unpublished(ctx)
	if err != nil {
		return Work{}, err
	}
	w.Unpublished = len(unpublished)
	if len(unpublished) > 0 {
		w.OldestUnpublishedAt = unpublished[0].CreatedAt
	}
	found := errors.New("found")
	err = s.queryGroup(ctx, inFlightPK, "", func(av map[string]types.AttributeValue) error {
		st, err := decodeJob(av)
		if err != nil {
			return err
		}
		if st.job.InFlight() {
			return found
		}
		return nil
	})
	switch {
	case errors.Is(err, found):
		w.InFlight = true
	case err != nil:
		return Work{}, err
	}
	return w, nil
}

// PumpLease is the pump's lease as stored.
type PumpLease struct {
	Holder string
	// Until is when it lapses unless renewed (0: released), and RenewedAt
	// when its holder last renewed it, store clock ms.
	Until     int64
	RenewedAt int64
	// WakeAt is when the wake-up a pump armed last fires (wall clock ms):
	// kept across holders, so that a pump arms the next only once that
	// one's time has come, and at most one is ever pending.
	WakeAt int64
}

const (
	pumpPK = "PUMP"
	pumpSK = "LEASE"
)

// PumpLeaseNow reads the lease, consistently; false if none is stored.
func (s *Store) PumpLeaseNow(ctx context.Context) (PumpLease, bool, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: key(pumpPK, pumpSK), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return PumpLease{}, false, fmt.Errorf("get pump lease: %w", err)
	}
	if out.Item == nil {
		return PumpLease{}, false, nil
	}
	l := PumpLease{}
	if v, ok := out.Item["holder"].(*types.AttributeValueMemberS); ok {
		l.Holder = v.Value
	}
	l.Until = numberOf(out.Item["until"])
	l.RenewedAt = numberOf(out.Item["renewedAt"])
	l.WakeAt = numberOf(out.Item["wakeAt"])
	return l, true, nil
}

func numberOf(av types.AttributeValue) int64 {
	v, ok := av.(*types.AttributeValueMemberN)
	if !ok {
		return 0
	}
	n, _ := strconv.ParseInt(v.Value, 10, 64)
	return n
}

// TakePumpLease makes holder the pump for ttlMs from now if nobody holds
// the lease (the item may hold only a wake-up), it lapsed or was released, or holder already holds it (a
// renewal). False, with nothing written, while another holder's lease runs.
func (s *Store) TakePumpLease(ctx context.Context, holder string, ttlMs int64) (bool, error) {
	now := s.now()
	return s.updatePumpLease(ctx, "SET holder = :h, #until = :u, renewedAt = :now",
		"attribute_not_exists(pk) OR attribute_not_exists(#until) OR #until < :now OR holder = :h", map[string]types.AttributeValue{
			":now": num(now), ":u": num(now + ttlMs), ":h": &types.AttributeValueMemberS{Value: holder},
		})
}

// PassPumpLease hands the lease from holder to successor, for ttlMs from
// now, in one write conditioned on holder still holding it: the hand-over
// before a pump's time runs out, where the successor starts holding it.
func (s *Store) PassPumpLease(ctx context.Context, holder, successor string, ttlMs int64) (bool, error) {
	now := s.now()
	return s.updatePumpLease(ctx, "SET holder = :s, #until = :u, renewedAt = :now", "holder = :h", map[string]types.AttributeValue{
		":now": num(now), ":u": num(now + ttlMs), ":h": &types.AttributeValueMemberS{Value: holder}, ":s": &types.AttributeValueMemberS{Value: successor},
	})
}

// DropPumpLease releases the lease if holder holds it (the wake-up it
// armed stays recorded).
func (s *Store) DropPumpLease(ctx context.Context, holder string) error {
	_, err := s.updatePumpLease(ctx, "SET #until = :zero", "holder = :h", map[string]types.AttributeValue{
		":zero": num(0), ":h": &types.AttributeValueMemberS{Value: holder},
	})
	return err
}

// ClaimPumpWake records wakeAt as the site's one pending pump wake-up if
// none is pending at now (none recorded, or the recorded one's time has
// come), whoever holds the lease; true tells the caller to arm it. Wall
// clock ms, as the wake-ups fire. One conditional write: of callers that
// find the slot free at once, one arms, so at most one wake-up is pending.
func (s *Store) ClaimPumpWake(ctx context.Context, wakeAt, now int64) (bool, error) {
	return s.updatePumpLease(ctx, "SET wakeAt = :w", "attribute_not_exists(wakeAt) OR wakeAt <= :now", map[string]types.AttributeValue{
		":w": num(wakeAt), ":now": num(now),
	})
}

// ForgetPumpWake removes the recorded wake-up if it is still wakeAt: one
// the Scheduler refused to arm, so that the next invocation arms one
// rather than trust a wake-up that will never fire.
func (s *Store) ForgetPumpWake(ctx context.Context, wakeAt int64) error {
	_, err := s.updatePumpLease(ctx, "REMOVE wakeAt", "wakeAt = :w", map[string]types.AttributeValue{":w": num(wakeAt)})
	return err
}

func (s *Store) updatePumpLease(ctx context.Context, update, cond string, vals map[string]types.AttributeValue) (bool, error) {
	in := &dynamodb.UpdateItemInput{TableName: &s.table, Key: key(pumpPK, pumpSK),
		UpdateExpression: aws.String(update), ConditionExpression: aws.String(cond), ExpressionAttributeValues: vals}
	if strings.Contains(update+cond, "#until") {
		// until is not a reserved word today; the name keeps the
		// expression valid if it becomes one.
		in.ExpressionAttributeNames = map[string]string{"#until": "until"}
	}
	_, err := s.db.UpdateItem(ctx, in)
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pump lease: %w", err)
	}
	return true, nil
}
