package bench

import (
	"context"
	"strings"
	"sync"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
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

func newCapacityMeter() *capacityMeter { return &capacityMeter{use: map[string]*Capacity{}} }

// notFunction names calls made outside any function: the benchmark's own
// preloading and table setup, never counted against a job.
const notFunction = "(outside functions)"

// snapshot copies the counts so far, keyed by function.
func (m *capacityMeter) snapshot() map[string]Capacity {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]Capacity, len(m.use))
	for k, v := range m.use {
		out[k] = *v
	}
	return out
}

func (m *capacityMeter) record(function string, c Capacity) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.use[function]
	if u == nil {
		u = &Capacity{}
		m.use[function] = u
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
			if err == nil {
				c := consumed(out.Result)
				c.Calls = 1
				m.record(functionOf(ctx), c)
			}
			return out, md, err
		}), middleware.After)
}

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

// consumed reads what a call reports. A read call's units are reads and a
// write call's are writes; where DynamoDB splits them (ReadCapacityUnits,
// WriteCapacityUnits) the split is used as given.
func consumed(result any) Capacity {
	var cs []types.ConsumedCapacity
	write := false
	switch out := result.(type) {
	case *dynamodb.GetItemOutput:
		cs = opt(out.ConsumedCapacity)
	case *dynamodb.QueryOutput:
		cs = opt(out.ConsumedCapacity)
	case *dynamodb.ScanOutput:
		cs = opt(out.ConsumedCapacity)
	case *dynamodb.BatchGetItemOutput:
		cs = out.ConsumedCapacity
	case *dynamodb.TransactGetItemsOutput:
		cs = out.ConsumedCapacity
	case *dynamodb.PutItemOutput:
		cs, write = opt(out.ConsumedCapacity), true
	case *dynamodb.UpdateItemOutput:
		cs, write = opt(out.ConsumedCapacity), true
	case *dynamodb.DeleteItemOutput:
		cs, write = opt(out.ConsumedCapacity), true
	case *dynamodb.BatchWriteItemOutput:
		cs, write = out.ConsumedCapacity, true
	case *dynamodb.TransactWriteItemsOutput:
		cs, write = out.ConsumedCapacity, true
	}
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
