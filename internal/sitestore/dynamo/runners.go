package dynamo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

func runnerPK(id string) string    { return "RUNNER#" + id }
func pairingPK(hash string) string { return "PAIR#" + hash }
func codePK(code string) string    { return "CODE#" + code }

const (
	skRunner  = "RUNNER"
	skPairing = "PAIR"
	skCode    = "CODE"
)

// runnerItem is a runner as stored; every field is an attribute, so
// touches and revocation are single conditional updates.
type runnerItem struct {
	PK              string                  `dynamodbav:"pk"`
	SK              string                  `dynamodbav:"sk"`
	GPK             string                  `dynamodbav:"gpk"`
	GSK             string                  `dynamodbav:"gsk"`
	ID              string                  `dynamodbav:"id"`
	Owner           string                  `dynamodbav:"owner"`
	Label           string                  `dynamodbav:"label"`
	Platform        string                  `dynamodbav:"platform"`
	DaemonVersion   string                  `dynamodbav:"daemonVersion"`
	Capabilities    []protocol.Capability   `dynamodbav:"capabilities"`
	RevokedAt       int64                   `dynamodbav:"revokedAt"`
	LastHeartbeatAt int64                   `dynamodbav:"lastHeartbeatAt"`
	CreatedAt       int64                   `dynamodbav:"createdAt"`
	Device          protocol.PublicIdentity `dynamodbav:"device"`
}

func (it runnerItem) runner() sitestore.Runner {
	return sitestore.Runner{ID: it.ID, Owner: it.Owner, Label: it.Label, Platform: it.Platform,
		DaemonVersion: it.DaemonVersion, Capabilities: nonNilCaps(it.Capabilities), RevokedAt: it.RevokedAt,
		LastHeartbeatAt: it.LastHeartbeatAt, CreatedAt: it.CreatedAt, Device: it.Device}
}

func runnerItemOf(r sitestore.Runner) runnerItem {
	return runnerItem{PK: runnerPK(r.ID), SK: skRunner, GPK: runnersPK, GSK: r.Owner + "#" + r.ID,
		ID: r.ID, Owner: r.Owner, Label: r.Label, Platform: r.Platform, DaemonVersion: r.DaemonVersion,
		Capabilities: nonNilCaps(r.Capabilities), RevokedAt: r.RevokedAt, LastHeartbeatAt: r.LastHeartbeatAt,
		CreatedAt: r.CreatedAt, Device: r.Device}
}

// pairingItem is a pairing as stored.
type pairingItem struct {
	PK             string                  `dynamodbav:"pk"`
	SK             string                  `dynamodbav:"sk"`
	DeviceCodeHash string                  `dynamodbav:"deviceCodeHash"`
	UserCode       string                  `dynamodbav:"userCode"`
	State          string                  `dynamodbav:"state"`
	Owner          string                  `dynamodbav:"owner"`
	RunnerID       string                  `dynamodbav:"runnerId"`
	Collected      bool                    `dynamodbav:"collected"`
	Label          string                  `dynamodbav:"label"`
	Platform       string                  `dynamodbav:"platform"`
	DaemonVersion  string                  `dynamodbav:"daemonVersion"`
	Capabilities   []protocol.Capability   `dynamodbav:"capabilities"`
	Device         protocol.PublicIdentity `dynamodbav:"device"`
	ExpiresAt      int64                   `dynamodbav:"expiresAt"`
	CreatedAt      int64                   `dynamodbav:"createdAt"`
}

func (it pairingItem) pairing() sitestore.Pairing {
	return sitestore.Pairing{DeviceCodeHash: it.DeviceCodeHash, UserCode: it.UserCode, State: it.State,
		Owner: it.Owner, RunnerID: it.RunnerID, Collected: it.Collected, Label: it.Label, Platform: it.Platform,
		DaemonVersion: it.DaemonVersion, Capabilities: nonNilCaps(it.Capabilities), Device: it.Device,
		ExpiresAt: it.ExpiresAt, CreatedAt: it.CreatedAt}
}

func pairingItemOf(p sitestore.Pairing) pairingItem {
	return pairingItem{PK: pairingPK(p.DeviceCodeHash), SK: skPairing, DeviceCodeHash: p.DeviceCodeHash,
		UserCode: p.UserCode, State: p.State, Owner: p.Owner, RunnerID: p.RunnerID, Collected: p.Collected,
		Label: p.Label, Platform: p.Platform, DaemonVersion: p.DaemonVersion, Capabilities: nonNilCaps(p.Capabilities),
		Device: p.Device, ExpiresAt: p.ExpiresAt, CreatedAt: p.CreatedAt}
}

// codeItem says which pairing holds a user code, until when.
type codeItem struct {
	PK        string `dynamodbav:"pk"`
	SK        string `dynamodbav:"sk"`
	Hash      string `dynamodbav:"hash"`
	ExpiresAt int64  `dynamodbav:"expiresAt"`
}

func nonNilCaps(c []protocol.Capability) []protocol.Capability {
	if c == nil {
		return []protocol.Capability{}
	}
	return c
}

func num(n int64) types.AttributeValue  { return &types.AttributeValueMemberN{Value: fmt.Sprint(n)} }
func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

// CreatePairing puts the pairing and claims its user code in one
// transaction. The code item's condition is the uniqueness rule: absent, or
// held by a pairing that has expired. Two starts racing for one code cannot
// both pass it.
func (s *Store) CreatePairing(ctx context.Context, p sitestore.Pairing) error {
	pi, err := attributevalue.MarshalMap(pairingItemOf(p))
	if err != nil {
		return err
	}
	ci, err := attributevalue.MarshalMap(codeItem{PK: codePK(p.UserCode), SK: skCode, Hash: p.DeviceCodeHash, ExpiresAt: p.ExpiresAt})
	if err != nil {
		return err
	}
	_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: &s.table, Item: pi, ConditionExpression: aws.String("attribute_not_exists(pk)")}},
		{Put: &types.Put{TableName: &s.table, Item: ci,
			ConditionExpression:       aws.String("attribute_not_exists(pk) OR expiresAt <= :now"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":now": num(s.now())}}},
	}})
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		if len(tce.CancellationReasons) == 2 && aws.ToString(tce.CancellationReasons[1].Code) == "ConditionalCheckFailed" {
			return sitestore.ErrUserCodeTaken
		}
		return fmt.Errorf("create pairing: %w", sitestore.ErrContention)
	}
	if err != nil {
		return fmt.Errorf("create pairing: %w", err)
	}
	return nil
}

func (s *Store) readPairing(ctx context.Context, hash string) (pairingItem, bool, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: key(pairingPK(hash), skPairing), ConsistentRead: aws.Bool(true)})
	if err != nil || out.Item == nil {
		return pairingItem{}, false, err
	}
	var it pairingItem
	err = attributevalue.UnmarshalMap(out.Item, &it)
	return it, err == nil, err
}

// PairingByDeviceCodeHash reads a pairing.
func (s *Store) PairingByDeviceCodeHash(ctx context.Context, hash string) (sitestore.Pairing, bool, error) {
	it, found, err := s.readPairing(ctx, hash)
	return it.pairing(), found, err
}

// PairingByUserCode follows the code item to the pairing holding it.
func (s *Store) PairingByUserCode(ctx context.Context, code string) (sitestore.Pairing, bool, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: key(codePK(code), skCode), ConsistentRead: aws.Bool(true)})
	if err != nil || out.Item == nil {
		return sitestore.Pairing{}, false, err
	}
	var ci codeItem
	if err := attributevalue.UnmarshalMap(out.Item, &ci); err != nil {
		return sitestore.Pairing{}, false, err
	}
	return s.PairingByDeviceCodeHash(ctx, ci.Hash)
}

// ApprovePairing creates the runner and approves the pairing in one
// transaction conditioned on the pairing still being pending and unexpired,
// so two approvals of one code create one runner.
func (s *Store) ApprovePairing(ctx context.Context, in sitestore.ApproveInput) (sitestore.Runner, error) {
	p, found, err := s.PairingByUserCode(ctx, in.UserCode)
	if err != nil {
		return sitestore.Runner{}, err
	}
	if !found {
		return sitestore.Runner{}, sitestore.ErrPairingUnknown
	}
	now := s.now()
	approved, r, err := sitestore.ApprovePairing(p, in, now)
	if err != nil {
		return sitestore.Runner{}, err
	}
	pi, err := attributevalue.MarshalMap(pairingItemOf(approved))
	if err != nil {
		return sitestore.Runner{}, err
	}
	ri, err := attributevalue.MarshalMap(runnerItemOf(r))
	if err != nil {
		return sitestore.Runner{}, err
	}
	_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: &s.table, Item: pi,
			ConditionExpression:       aws.String("#s = :pending AND expiresAt > :now"),
			ExpressionAttributeNames:  map[string]string{"#s": "state"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":pending": str(sitestore.PairingPending), ":now": num(now)}}},
		{Put: &types.Put{TableName: &s.table, Item: ri, ConditionExpression: aws.String("attribute_not_exists(pk)")}},
	}})
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		// Somebody decided first: answer from what is there now.
		p, _, rerr := s.PairingByDeviceCodeHash(ctx, p.DeviceCodeHash)
		if rerr != nil {
			return sitestore.Runner{}, rerr
		}
		if _, _, err := sitestore.ApprovePairing(p, in, s.now()); err != nil {
			return sitestore.Runner{}, err
		}
		return sitestore.Runner{}, fmt.Errorf("approve pairing: %w", sitestore.ErrContention)
	}
	if err != nil {
		return sitestore.Runner{}, fmt.Errorf("approve pairing: %w", err)
	}
	return r, nil
}

// DenyPairing marks the pairing holding the code denied.
func (s *Store) DenyPairing(ctx context.Context, code string) error {
	p, found, err := s.PairingByUserCode(ctx, code)
	if err != nil || !found {
		return err
	}
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: key(pairingPK(p.DeviceCodeHash), skPairing),
		UpdateExpression:          aws.String("SET #s = :denied"),
		ExpressionAttributeNames:  map[string]string{"#s": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":denied": str(sitestore.PairingDenied)},
	})
	return err
}

// CollectPairing flips collected false to true on an approved pairing: the
// condition is what makes delivery once-only across replicas.
func (s *Store) CollectPairing(ctx context.Context, hash string) (bool, error) {
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: key(pairingPK(hash), skPairing),
		UpdateExpression:          aws.String("SET collected = :t"),
		ConditionExpression:       aws.String("#s = :approved AND collected = :f"),
		ExpressionAttributeNames:  map[string]string{"#s": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":approved": str(sitestore.PairingApproved), ":t": &types.AttributeValueMemberBOOL{Value: true}, ":f": &types.AttributeValueMemberBOOL{Value: false}},
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return false, nil
	}
	return err == nil, err
}

// Runner reads one runner.
func (s *Store) Runner(ctx context.Context, id string) (sitestore.Runner, bool, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: key(runnerPK(id), skRunner), ConsistentRead: aws.Bool(true)})
	if err != nil || out.Item == nil {
		return sitestore.Runner{}, false, err
	}
	var it runnerItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return sitestore.Runner{}, false, err
	}
	return it.runner(), true, nil
}

// TouchRunner records a heartbeat on an existing runner. The runner item
// is in the group index (RUNNERS, every attribute projected), so every
// write of it is also an index write. A heartbeat therefore writes only
// when the runner changed (capabilities, daemon version) or its stored
// heartbeat time is RunnerRefreshMs old: what the index serves (runner
// lists, availability's liveness test against the stored time) sees a
// heartbeat time at most RunnerRefreshMs behind the last heartbeat. An
// unchanged heartbeat is a failed condition, which writes nothing, and
// answers the runner as stored.
func (s *Store) TouchRunner(ctx context.Context, in sitestore.TouchInput) (sitestore.Runner, bool, error) {
	caps, err := attributevalue.Marshal(nonNilCaps(in.Capabilities))
	if err != nil {
		return sitestore.Runner{}, false, err
	}
	now := s.now()
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: key(runnerPK(in.RunnerID), skRunner),
		UpdateExpression: aws.String("SET capabilities = :c, daemonVersion = :v, lastHeartbeatAt = :now"),
		ConditionExpression: aws.String("attribute_exists(pk) AND " +
			"(capabilities <> :c OR daemonVersion <> :v OR lastHeartbeatAt <= :stale)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":c": caps, ":v": str(in.DaemonVersion),
			":now": num(now), ":stale": num(now - s.runnerRefresh)},
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var item map[string]types.AttributeValue
	if out != nil {
		item = out.Attributes
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		if ccf.Item == nil {
			return sitestore.Runner{}, false, nil
		}
		item, err = ccf.Item, nil
	}
	if err != nil {
		return sitestore.Runner{}, false, err
	}
	var it runnerItem
	if err := attributevalue.UnmarshalMap(item, &it); err != nil {
		return sitestore.Runner{}, false, err
	}
	return it.runner(), true, nil
}

// RevokeRunner sets revokedAt once: the condition keeps the first time.
func (s *Store) RevokeRunner(ctx context.Context, id string) error {
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: key(runnerPK(id), skRunner),
		UpdateExpression:          aws.String("SET revokedAt = :now"),
		ConditionExpression:       aws.String("attribute_exists(pk) AND revokedAt = :zero"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": num(s.now()), ":zero": num(0)},
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return nil
	}
	return err
}

// Runners lists runners from the group index, by creation.
func (s *Store) Runners(ctx context.Context, owner string) ([]sitestore.Runner, error) {
	prefix := ""
	if owner != "" {
		prefix = owner + "#"
	}
	var out []sitestore.Runner
	err := s.queryGroup(ctx, runnersPK, prefix, func(av map[string]types.AttributeValue) error {
		var it runnerItem
		if err := attributevalue.UnmarshalMap(av, &it); err != nil {
			return err
		}
		// An owner id containing '#' shares a prefix with another; the
		// exact owner is the answer.
		if owner == "" || it.Owner == owner {
			out = append(out, it.runner())
		}
		return nil
	})
	slices.SortFunc(out, func(a, b sitestore.Runner) int {
		if a.CreatedAt != b.CreatedAt {
			return int(a.CreatedAt - b.CreatedAt)
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, err
}

// Reset deletes every item: the test-only admin listener's clean slate and
// the one scan in this package, never on a request path.
func (s *Store) Reset(ctx context.Context) error {
	in := &dynamodb.ScanInput{TableName: &s.table, ProjectionExpression: aws.String("pk, sk")}
	for {
		out, err := s.db.Scan(ctx, in)
		if err != nil {
			return fmt.Errorf("reset: %w", err)
		}
		for _, av := range out.Items {
			if _, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.table, Key: map[string]types.AttributeValue{"pk": av["pk"], "sk": av["sk"]}}); err != nil {
				return fmt.Errorf("reset: %w", err)
			}
		}
		if out.LastEvaluatedKey == nil {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}
