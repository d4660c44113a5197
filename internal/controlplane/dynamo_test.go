package controlplane_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/projection"
)

// hooked wraps the DynamoDB client to inject what DynamoDB Local never
// does on its own, and to count what a caller asks for.
type hooked struct {
	controlplane.DynamoAPI
	mu            sync.Mutex
	failTransact  error
	transactCalls int
	queried       []string
	got           []string
	failPut       func(pk string) error
}

func (h *hooked) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	h.mu.Lock()
	if v, ok := in.Key["pk"].(*types.AttributeValueMemberS); ok {
		h.got = append(h.got, v.Value)
	}
	h.mu.Unlock()
	return h.DynamoAPI.GetItem(ctx, in, opts...)
}

// PutItem fails a put failPut says to, as a throttled or lost write
// would: DynamoDB Local never fails one write of many on its own.
func (h *hooked) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	h.mu.Lock()
	fail := h.failPut
	h.mu.Unlock()
	if v, ok := in.Item["pk"].(*types.AttributeValueMemberS); ok && fail != nil {
		if err := fail(v.Value); err != nil {
			return nil, err
		}
	}
	return h.DynamoAPI.PutItem(ctx, in, opts...)
}

func (h *hooked) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	h.mu.Lock()
	if v, ok := in.ExpressionAttributeValues[":pk"].(*types.AttributeValueMemberS); ok {
		h.queried = append(h.queried, v.Value)
	}
	h.mu.Unlock()
	return h.DynamoAPI.Query(ctx, in, opts...)
}

func (h *hooked) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	h.mu.Lock()
	h.transactCalls++
	fail := h.transactCalls == 1 && h.failTransact != nil
	h.mu.Unlock()
	if fail {
		return nil, h.failTransact
	}
	return h.DynamoAPI.TransactWriteItems(ctx, in, opts...)
}

func hookedAdmin(t *testing.T, api *hooked) *controlplane.Admin {
	t.Helper()
	return controlplane.NewAdmin(controlplane.AdminConfig{Store: controlplane.NewStore(controlplane.NewDynamoStorage(api, newTable(t))), Logger: quiet})
}

func TestATransactionConflictReappliesTheChange(t *testing.T) {
	api := &hooked{DynamoAPI: dynamoClient(t), failTransact: &types.TransactionCanceledException{
		Message:             aws.String("Transaction cancelled"),
		CancellationReasons: []types.CancellationReason{{Code: aws.String("None")}, {Code: aws.String("TransactionConflict")}},
	}}
	if _, _, err := hookedAdmin(t, api).PutRoster(t.Context(), "r", "alice", []string{"bob"}); err != nil || api.transactCalls != 2 {
		t.Fatalf("%v after %d transactions; want the change to land on the second", err, api.transactCalls)
	}
}

func TestAnotherFailureIsAnErrorNotARetry(t *testing.T) {
	api := &hooked{DynamoAPI: dynamoClient(t), failTransact: &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")}}
	if _, _, err := hookedAdmin(t, api).PutRoster(t.Context(), "r", "alice", []string{"bob"}); err == nil || !strings.Contains(err.Error(), "slow down") || api.transactCalls != 1 {
		t.Fatalf("got %v after %d transactions", err, api.transactCalls)
	}
}

// A daemon request's scope reads the device's partition, its owner's and
// the sites its consents name (each through the read copy its runner id
// picks), and nothing else: not another owner's, and no partition every
// request reads.
func TestAScopeReadsOnlyThePartitionsThatDecideIt(t *testing.T) {
	table := newTable(t)
	admin := controlplane.NewAdmin(controlplane.AdminConfig{Store: controlplane.NewStore(controlplane.NewDynamoStorage(dynamoClient(t), table)), Logger: quiet})
	ctx := t.Context()
	f := projection.EmptyFixture()
	for _, id := range []string{"site-a", "site-b", "site-c"} {
		f.Sites = append(f.Sites, projection.SiteRecord{SiteID: id, Site: newKeys(t).Public()})
	}
	f.Consents = []projection.ConsentRecord{{Owner: "alice", SiteID: "site-a"}, {Owner: "alice", SiteID: "site-b"}, {Owner: "bob", SiteID: "site-c"}}
	f.Devices = []projection.DeviceRecord{{Owner: "alice", RunnerID: "r1", Device: newKeys(t).Public()}, {Owner: "bob", RunnerID: "r2", Device: newKeys(t).Public()}}
	if _, err := admin.Import(ctx, f); err != nil {
		t.Fatal(err)
	}
	api := &hooked{DynamoAPI: dynamoClient(t)}
	p, err := controlplane.NewStore(controlplane.NewDynamoStorage(api, table)).Scoped(ctx, projection.Query{RunnerID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.SitesFor("alice")) != 2 {
		t.Fatalf("alice's sites: %+v", p.SitesFor("alice"))
	}
	got := strings.Join(slices.Sorted(slices.Values(api.queried)), " ")
	if want := "VD#r1 VO#alice"; got != want {
		t.Fatalf("queried %s, want %s", got, want)
	}
	k := controlplane.CopyFor(projection.Query{RunnerID: "r1"}, controlplane.DefaultSiteCopies)
	got = strings.Join(slices.Sorted(slices.Values(api.got)), " ")
	if want := controlplane.SiteCopyKey("site-a", k) + " " + controlplane.SiteCopyKey("site-b", k); got != want {
		t.Fatalf("read items %q, want the sites' copy %d: %q", got, k, want)
	}
}
