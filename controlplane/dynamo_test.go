package controlplane_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/controlplane"
)

// hooked wraps the DynamoDB client to inject what DynamoDB Local never
// does on its own.
type hooked struct {
	controlplane.DynamoAPI
	once          sync.Once
	beforeQuery   func()
	failTransact  error
	transactCalls int
}

func (h *hooked) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if h.beforeQuery != nil {
		h.once.Do(h.beforeQuery)
	}
	return h.DynamoAPI.Query(ctx, in, opts...)
}

func (h *hooked) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	h.transactCalls++
	if h.transactCalls == 1 && h.failTransact != nil {
		return nil, h.failTransact
	}
	return h.DynamoAPI.TransactWriteItems(ctx, in, opts...)
}

func TestATransactionConflictIsALostRaceAndTheChangeIsReapplied(t *testing.T) {
	api := &hooked{DynamoAPI: dynamoClient(t), failTransact: &types.TransactionCanceledException{
		Message:             aws.String("Transaction cancelled"),
		CancellationReasons: []types.CancellationReason{{Code: aws.String("None")}, {Code: aws.String("TransactionConflict")}},
	}}
	s := controlplane.NewStore(controlplane.NewDynamoStorage(api, newTable(t)))
	version, err := s.Update(t.Context(), addRoster("r"))
	if err != nil || version != 1 || api.transactCalls != 2 {
		t.Fatalf("version %d, %v after %d transactions; want the change to land on the second", version, err, api.transactCalls)
	}
}

func TestAnotherFailureIsAnErrorNotARetry(t *testing.T) {
	api := &hooked{DynamoAPI: dynamoClient(t), failTransact: &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")}}
	s := controlplane.NewStore(controlplane.NewDynamoStorage(api, newTable(t)))
	if _, err := s.Update(t.Context(), addRoster("r")); err == nil || !strings.Contains(err.Error(), "slow down") || api.transactCalls != 1 {
		t.Fatalf("got %v after %d transactions", err, api.transactCalls)
	}
}

// A reader that read the version just before two changes landed finds that
// version's chunks retired, and reads again rather than failing or
// returning half a document.
func TestAReaderOvertakenByTwoChangesReadsTheNewest(t *testing.T) {
	table := newTable(t)
	writer := controlplane.NewStore(controlplane.NewDynamoStorage(dynamoClient(t), table))
	ctx := t.Context()
	if _, err := writer.Update(ctx, addRoster("v1")); err != nil {
		t.Fatal(err)
	}
	api := &hooked{DynamoAPI: dynamoClient(t), beforeQuery: func() {
		for _, id := range []string{"v2", "v3"} {
			if _, err := writer.Update(ctx, addRoster(id)); err != nil {
				t.Errorf("update: %v", err)
			}
		}
	}}
	p, err := controlplane.NewStore(controlplane.NewDynamoStorage(api, table)).Projection(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rosterIDs(t, p), ","); got != "v1,v2,v3" {
		t.Fatalf("rosters %s, want the newest version", got)
	}
}
