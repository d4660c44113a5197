package bench

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/byorelay/byorelay/internal/bench/partkey"
	"github.com/byorelay/byorelay/store/dynamo"
)

// capacityMeter counts the DynamoDB capacity every call reports, by the
// Lambda function that made it. It is SDK middleware rather than a wrapper
// around the store's client, so it sees every call a function makes (the
// routing store's and the control plane's projection reads alike) without
// the functions being built differently for the benchmark. The function is
// read from the Lambda context the local API server puts on each
// invocation, exactly as a deployed function's context carries it.
type capacityMeter struct {
	mu  sync.Mutex
	use map[string]*Capacity
	// keys is the same capacity by partition key (partkey.Of, share).
	keys map[string]*Capacity
	// polls is the part of keys the site's polls spent, by poll function
	// and key (pollKey), so a site's load can be modelled by its poll
	// rate apart from its job rate (siteload.go).
	polls map[string]*Capacity
}

// Capacity is DynamoDB capacity consumed, as ReturnConsumedCapacity
// reports it (INDEXES: the table's and every index's units). IndexWrite is
// the part of WriteUnits spent keeping global secondary indexes current.
type Capacity struct {
	Calls      int     `json:"calls"`
	ReadUnits  float64 `json:"readUnits"`
	WriteUnits float64 `json:"writeUnits"`
	IndexWrite float64 `json:"indexWriteUnits"`
}

func (c *Capacity) add(o Capacity) {
	c.Calls += o.Calls
	c.ReadUnits += o.ReadUnits
	c.WriteUnits += o.WriteUnits
	c.IndexWrite += o.IndexWrite
}

func (c Capacity) minus(o Capacity) Capacity {
	return Capacity{Calls: c.Calls - o.Calls, ReadUnits: c.ReadUnits - o.ReadUnits,
		WriteUnits: c.WriteUnits - o.WriteUnits, IndexWrite: c.IndexWrite - o.IndexWrite}
}

func newCapacityMeter() *capacityMeter {
	return &capacityMeter{use: map[string]*Capacity{}, keys: map[string]*Capacity{}, polls: map[string]*Capacity{}}
}

// notFunction names calls made outside any function: the benchmark's own
// preloading and table setup, never counted against a job.
const notFunction = "(outside functions)"

// snapshot copies the counts so far, keyed by function.
func (m *capacityMeter) snapshot() map[string]Capacity {
	m.mu.Lock()
	defer m.mu.Unlock()
	return copyCounts(m.use)
}

// snapshotKeys copies the counts so far, keyed by partition key. Calls
// made outside any function are left out, as they are from every phase.
func (m *capacityMeter) snapshotKeys() map[string]Capacity {
	m.mu.Lock()
	defer m.mu.Unlock()
	return copyCounts(m.keys)
}

// snapshotPolls copies the counts so far of the site's polls, by pollKey.
func (m *capacityMeter) snapshotPolls() map[string]Capacity {
	m.mu.Lock()
	defer m.mu.Unlock()
	return copyCounts(m.polls)
}

func copyCounts(counts map[string]*Capacity) map[string]Capacity {
	out := make(map[string]Capacity, len(counts))
	for k, v := range counts {
		out[k] = *v
	}
	return out
}

// record counts one call's capacity under its function and under the
// partition keys it touches (keyShares). Calls outside functions count
// under no key.
func (m *capacityMeter) record(function string, keys map[string]Capacity, c Capacity) {
	m.mu.Lock()
	defer m.mu.Unlock()
	addTo(m.use, function, c)
	if function == notFunction {
		return
	}
	poll := pollFunction(function)
	for k, part := range keys {
		addTo(m.keys, k, part)
		if poll != "" {
			addTo(m.polls, pollKey(poll, k), part)
		}
	}
}

// pollFunctions are the functions (template.yaml's names) of the reads a
// site makes on a timer rather than once a job, by the endpoint each
// answers: a stock site polls pending and results every pollEvery,
// whatever its rate.
var pollFunctions = map[string]string{"PendingFunction": "pending", "ResultsFunction": "results"}

// pollEndpoints are pollFunctions' endpoints.
var pollEndpoints = []string{"pending", "results"}

// pollFunction is the endpoint of the poll function a call was made by
// (its in-line sweep's calls count as the poll's), or "".
func pollFunction(function string) string {
	return pollFunctions[strings.TrimSuffix(function, sweepSuffix)]
}

// pollKey names a key's capacity spent by one poll function, by its
// endpoint; splitPollKey reads it back.
func pollKey(function, key string) string { return function + "\x1f" + key }

func splitPollKey(k string) (function, key string) {
	function, key, _ = strings.Cut(k, "\x1f")
	return function, key
}

func addTo(use map[string]*Capacity, name string, c Capacity) {
	u := use[name]
	if u == nil {
		u = &Capacity{}
		use[name] = u
	}
	u.add(c)
}

// apiOption installs the meter on every DynamoDB client built from a
// config carrying it (aws.Config.APIOptions).
func (m *capacityMeter) apiOption(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("BenchConsumedCapacity",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			askForCapacity(in.Parameters)
			out, md, err := next.HandleInitialize(ctx, in)
			var c Capacity
			var byIndex map[string]float64
			if err == nil {
				c = billed(in.Parameters, consumed(out.Result))
				byIndex = indexWrites(out.Result)
			} else {
				c = billedRefusal(in.Parameters, err)
			}
			c.Calls = 1
			fn := functionOf(ctx)
			if dynamo.Sweeping(ctx) && fn != notFunction {
				fn += sweepSuffix
			}
			m.record(fn, keyShares(partkey.Of(in.Parameters), c, byIndex, partkey.IndexWrites(in.Parameters)), c)
			return out, md, err
		}), middleware.After)
}

// sweepSuffix names the part of a function's capacity its in-line sweep
// spent (store/dynamo marks the sweep's calls): the end of other jobs'
// lives (and any requeue) rides on whichever request sweeps first, so it
// is billed apart from the request's own work.
const sweepSuffix = " (in-line sweep)"

// functionOf is the function whose invocation ctx belongs to: the last
// segment of the invoked ARN, which the local API server sets to the
// function's logical id (ClaimFunction, …).
func functionOf(ctx context.Context) string {
	lc, ok := lambdacontext.FromContext(ctx)
	if !ok || lc.InvokedFunctionArn == "" {
		return notFunction
	}
	arn := lc.InvokedFunctionArn
	return arn[strings.LastIndex(arn, ":")+1:]
}

const indexes = types.ReturnConsumedCapacityIndexes

func askForCapacity(params any) {
	switch in := params.(type) {
	case *dynamodb.GetItemInput:
		in.ReturnConsumedCapacity = indexes
	case *dynamodb.PutItemInput:
		in.ReturnConsumedCapacity = indexes
	case *dynamodb.UpdateItemInput:
		in.ReturnConsumedCapacity = indexes
	case *dynamodb.DeleteItemInput:
		in.ReturnConsumedCapacity = indexes
	case *dynamodb.QueryInput:
		in.ReturnConsumedCapacity = indexes
	case *dynamodb.ScanInput:
		in.ReturnConsumedCapacity = indexes
	case *dynamodb.BatchGetItemInput:
		in.ReturnConsumedCapacity = indexes
	case *dynamodb.BatchWriteItemInput:
		in.ReturnConsumedCapacity = indexes
	case *dynamodb.TransactGetItemsInput:
		in.ReturnConsumedCapacity = indexes
	case *dynamodb.TransactWriteItemsInput:
		in.ReturnConsumedCapacity = indexes
	}
}

// The service's billing rules that DynamoDB Local's reports leave out,
// applied here so a job's cost is what an on-demand table would bill
// (docs/cost.md states them):
//
//   - a read request is billed at least 0.5 RCU (eventually consistent)
//     or 1 RCU (strongly consistent), even when it returns nothing: Local
//     reports 0 for an empty Query;
//   - a write whose condition fails is billed, and reports nothing: it is
//     counted at 1 WCU, the service's minimum (the service bills the
//     larger of the existing item and 1 KB, so this is a lower bound);
//   - a cancelled TransactWriteItems is billed 2 WCU per action (prepare
//     and commit of a 1 KB item; a lower bound for larger items), a
//     cancelled TransactGetItems 2 RCU per item;
//   - a transactional write's index maintenance is counted as Local
//     reports it, doubled like the table's (an upper bound: AWS documents
//     the doubling for the items of the transaction, not for its indexes).
//
// Other errors (throttling, network) are counted as calls with no units.

// billed is a successful call's capacity with the read floor applied.
func billed(params any, c Capacity) Capacity {
	floor := 0.0
	switch in := params.(type) {
	case *dynamodb.GetItemInput:
		floor = readFloor(in.ConsistentRead)
	case *dynamodb.QueryInput:
		floor = readFloor(in.ConsistentRead)
	case *dynamodb.ScanInput:
		floor = readFloor(in.ConsistentRead)
	}
	c.ReadUnits = max(c.ReadUnits, floor)
	return c
}

func readFloor(consistent *bool) float64 {
	if consistent != nil && *consistent {
		return 1
	}
	return 0.5
}

// billedRefusal is what a failed call is billed.
func billedRefusal(params any, err error) Capacity {
	var cond *types.ConditionalCheckFailedException
	var cancelled *types.TransactionCanceledException
	switch {
	case errors.As(err, &cond):
		return Capacity{WriteUnits: 1}
	case errors.As(err, &cancelled):
		switch in := params.(type) {
		case *dynamodb.TransactWriteItemsInput:
			return Capacity{WriteUnits: 2 * float64(len(in.TransactItems))}
		case *dynamodb.TransactGetItemsInput:
			return Capacity{ReadUnits: 2 * float64(len(in.TransactItems))}
		}
	}
	return Capacity{}
}

// consumed reads what a call reports. A read call's units are reads and a
// write call's are writes; where DynamoDB splits them (ReadCapacityUnits,
// WriteCapacityUnits) the split is used as given.
func consumed(result any) Capacity {
	cs, write := reported(result)
	var c Capacity
	for _, u := range cs {
		switch {
		case u.ReadCapacityUnits != nil || u.WriteCapacityUnits != nil:
			c.ReadUnits += deref(u.ReadCapacityUnits)
			c.WriteUnits += deref(u.WriteCapacityUnits)
		case write:
			c.WriteUnits += deref(u.CapacityUnits)
		default:
			c.ReadUnits += deref(u.CapacityUnits)
		}
		if write {
			for _, ix := range u.GlobalSecondaryIndexes {
				c.IndexWrite += indexUnits(ix)
			}
		}
	}
	return c
}

// reported is the capacity a call's answer reports, and whether the call
// is a write.
func reported(result any) (cs []types.ConsumedCapacity, write bool) {
	switch out := result.(type) {
	case *dynamodb.GetItemOutput:
		return opt(out.ConsumedCapacity), false
	case *dynamodb.QueryOutput:
		return opt(out.ConsumedCapacity), false
	case *dynamodb.ScanOutput:
		return opt(out.ConsumedCapacity), false
	case *dynamodb.BatchGetItemOutput:
		return out.ConsumedCapacity, false
	case *dynamodb.TransactGetItemsOutput:
		return out.ConsumedCapacity, false
	case *dynamodb.PutItemOutput:
		return opt(out.ConsumedCapacity), true
	case *dynamodb.UpdateItemOutput:
		return opt(out.ConsumedCapacity), true
	case *dynamodb.DeleteItemOutput:
		return opt(out.ConsumedCapacity), true
	case *dynamodb.BatchWriteItemOutput:
		return out.ConsumedCapacity, true
	case *dynamodb.TransactWriteItemsOutput:
		return out.ConsumedCapacity, true
	}
	return nil, false
}

func indexUnits(ix types.Capacity) float64 {
	if ix.WriteCapacityUnits != nil {
		return *ix.WriteCapacityUnits
	}
	return deref(ix.CapacityUnits)
}

func opt(c *types.ConsumedCapacity) []types.ConsumedCapacity {
	if c == nil {
		return nil
	}
	return []types.ConsumedCapacity{*c}
}

func deref(f *float64) float64 {
	if f == nil {
		return 0
	}
	return *f
}
