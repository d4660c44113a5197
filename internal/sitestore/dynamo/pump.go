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
// site (TakePumpLease and the rest). docs/decisions/0028-site-pump.md
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
	// Until is when it lapses unless renewed, and RenewedAt when its
	// holder last renewed it, store clock ms.
	Until     int64
	RenewedAt int64
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
// the lease, it lapsed, or holder already holds it (a renewal). False,
// with nothing written, while another holder's lease runs.
func (s *Store) TakePumpLease(ctx context.Context, holder string, ttlMs int64) (bool, error) {
	now := s.now()
	return s.putPumpLease(ctx, holder, now, ttlMs,
		"attribute_not_exists(pk) OR #until < :now OR holder = :h", map[string]types.AttributeValue{
			":now": num(now), ":h": &types.AttributeValueMemberS{Value: holder},
		})
}

// PassPumpLease hands the lease from holder to successor, for ttlMs from
// now, in one write conditioned on holder still holding it: the hand-over
// before a pump's time runs out, where the successor starts holding it.
func (s *Store) PassPumpLease(ctx context.Context, holder, successor string, ttlMs int64) (bool, error) {
	return s.putPumpLease(ctx, successor, s.now(), ttlMs, "holder = :h", map[string]types.AttributeValue{
		":h": &types.AttributeValueMemberS{Value: holder},
	})
}

// DropPumpLease deletes the lease if holder holds it.
func (s *Store) DropPumpLease(ctx context.Context, holder string) error {
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.table, Key: key(pumpPK, pumpSK),
		ConditionExpression:       aws.String("holder = :h"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":h": &types.AttributeValueMemberS{Value: holder}}})
	var ccf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return fmt.Errorf("drop pump lease: %w", err)
	}
	return nil
}

func (s *Store) putPumpLease(ctx context.Context, holder string, now, ttlMs int64, cond string, vals map[string]types.AttributeValue) (bool, error) {
	item := key(pumpPK, pumpSK)
	item["holder"] = &types.AttributeValueMemberS{Value: holder}
	item["until"] = num(now + ttlMs)
	item["renewedAt"] = num(now)
	_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: item,
		ConditionExpression: aws.String(cond), ExpressionAttributeNames: namesIn(cond), ExpressionAttributeValues: vals})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("put pump lease: %w", err)
	}
	return true, nil
}

// namesIn names #until when the condition uses it (until is not a
// reserved word today; the name keeps the expression valid if it becomes
// one, and DynamoDB refuses names an expression does not use).
func namesIn(cond string) map[string]string {
	if strings.Contains(cond, "#until") {
		return map[string]string{"#until": "until"}
	}
	return nil
}
