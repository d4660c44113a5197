package ddb

import (
	"context"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Meter adds up the capacity DynamoDB reports for every successful call a
// store makes (ReturnConsumedCapacity=INDEXES: table and indexes), and
// counts the calls, so a benchmark can show what one operation costs. Set it
// as Config.Meter. The service bills a failed conditional write too, but
// reports nothing with the failure, so those are not counted. DynamoDB Local
// reports capacity from the item sizes a call touches, and 0 for a query
// that finds nothing (the service bills at least 0.5 RCU): read Calls
// beside the units.
type Meter struct {
	mu    sync.Mutex
	read  float64
	write float64
	calls int
}

// Capacity is what a Meter has counted.
type Capacity struct {
	ReadUnits  float64
	WriteUnits float64
	Calls      int
}

// Total returns what the meter has counted so far.
func (m *Meter) Total() Capacity {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Capacity{ReadUnits: m.read, WriteUnits: m.write, Calls: m.calls}
}

// Reset sets the counts back to zero.
func (m *Meter) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.read, m.write, m.calls = 0, 0, 0
}

// Wrap is api with every call counted on m: for another store over the
// same client interface (the site store) to report capacity the same way.
func (m *Meter) Wrap(api API) API { return &metered{api: api, m: m} }

// metered asks for and counts consumed capacity on every call.
type metered struct {
	api API
	m   *Meter
}

const rcc = types.ReturnConsumedCapacityIndexes

// count adds the total each call reports. CapacityUnits is the whole
// operation (table and indexes); whether it was reads or writes is known
// from the call.
func (x *metered) count(kind string, cs ...types.ConsumedCapacity) {
	x.m.mu.Lock()
	defer x.m.mu.Unlock()
	x.m.calls++
	for _, c := range cs {
		if c.CapacityUnits == nil {
			continue
		}
		if kind == "read" {
			x.m.read += *c.CapacityUnits
		} else {
			x.m.write += *c.CapacityUnits
		}
	}
}

func one(c *types.ConsumedCapacity) []types.ConsumedCapacity {
	if c == nil {
		return nil
	}
	return []types.ConsumedCapacity{*c}
}

func (x *metered) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	in.ReturnConsumedCapacity = rcc
	out, err := x.api.GetItem(ctx, in, o...)
	if err == nil {
		x.count("read", one(out.ConsumedCapacity)...)
	}
	return out, err
}

func (x *metered) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	in.ReturnConsumedCapacity = rcc
	out, err := x.api.PutItem(ctx, in, o...)
	if err == nil {
		x.count("write", one(out.ConsumedCapacity)...)
	}
	return out, err
}

func (x *metered) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	in.ReturnConsumedCapacity = rcc
	out, err := x.api.UpdateItem(ctx, in, o...)
	if err == nil {
		x.count("write", one(out.ConsumedCapacity)...)
	}
	return out, err
}

func (x *metered) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	in.ReturnConsumedCapacity = rcc
	out, err := x.api.DeleteItem(ctx, in, o...)
	if err == nil {
		x.count("write", one(out.ConsumedCapacity)...)
	}
	return out, err
}

func (x *metered) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	in.ReturnConsumedCapacity = rcc
	out, err := x.api.Query(ctx, in, o...)
	if err == nil {
		x.count("read", one(out.ConsumedCapacity)...)
	}
	return out, err
}

func (x *metered) Scan(ctx context.Context, in *dynamodb.ScanInput, o ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	in.ReturnConsumedCapacity = rcc
	out, err := x.api.Scan(ctx, in, o...)
	if err == nil {
		x.count("read", one(out.ConsumedCapacity)...)
	}
	return out, err
}

func (x *metered) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	in.ReturnConsumedCapacity = rcc
	out, err := x.api.BatchGetItem(ctx, in, o...)
	if err == nil {
		x.count("read", out.ConsumedCapacity...)
	}
	return out, err
}

func (x *metered) TransactGetItems(ctx context.Context, in *dynamodb.TransactGetItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactGetItemsOutput, error) {
	in.ReturnConsumedCapacity = rcc
	out, err := x.api.TransactGetItems(ctx, in, o...)
	if err == nil {
		x.count("read", out.ConsumedCapacity...)
	}
	return out, err
}

func (x *metered) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	in.ReturnConsumedCapacity = rcc
	out, err := x.api.TransactWriteItems(ctx, in, o...)
	if err == nil {
		x.count("write", out.ConsumedCapacity...)
	}
	return out, err
}
