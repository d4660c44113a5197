package dynamo

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/byorelay/byorelay/internal/platform/clock"
)

// StreamPollEvery is how often the stream reader asks each shard for new
// records. A write by any process is heard within StreamPollEvery plus the
// table stream's own delay (under a second on DynamoDB, tens of
// milliseconds on DynamoDB Local); the tests hold it to StreamHeardWithin.
const StreamPollEvery = 250 * time.Millisecond

// StreamHeardWithin is the stated bound from a write in any process to its
// subscribers' onChange, on DynamoDB Local.
const StreamHeardWithin = 3 * time.Second

// StreamsAPI is the part of *dynamodbstreams.Client the reader uses.
type StreamsAPI interface {
	ListStreams(context.Context, *dynamodbstreams.ListStreamsInput, ...func(*dynamodbstreams.Options)) (*dynamodbstreams.ListStreamsOutput, error)
	DescribeStream(context.Context, *dynamodbstreams.DescribeStreamInput, ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error)
	GetShardIterator(context.Context, *dynamodbstreams.GetShardIteratorInput, ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error)
	GetRecords(context.Context, *dynamodbstreams.GetRecordsInput, ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error)
}

// streamReader follows the site table's stream while anyone is subscribed,
// and notifies each record's job. It runs only while there are
// subscribers: a waiter subscribes before its first read of the store, so
// records older than the first subscription are nothing it needs.
//
// A restart (a failed call, an expired iterator) resumes every shard after
// the last sequence number read from it, so records written while the
// reader was down are read then, not lost; and it notifies every watched
// job once, so a record the stream no longer holds (past its 24 hours) is
// covered by the waiter's re-read of the store.
type streamReader struct {
	s *Store

	mu       sync.Mutex
	api      StreamsAPI // built on first use
	watching int
	stop     context.CancelFunc
	done     chan struct{}
	// last is the last sequence number read, by shard id; a shard without
	// one starts at its latest record (first start) or its horizon (a
	// shard that appeared while reading: a child of a split).
	last  map[string]string
	fresh bool
}

func (r *streamReader) client() StreamsAPI {
	if r.api == nil {
		if r.s.streamsAPI != nil {
			r.api = r.s.streamsAPI
		} else {
			r.api = dynamodbstreams.NewFromConfig(*r.s.awsConfig)
		}
	}
	return r.api
}

// add counts a subscriber, starting the reader for the first.
func (r *streamReader) add() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watching++
	if r.watching == 1 {
		r.startLocked(true)
	}
}

// remove uncounts one, stopping the reader after the last.
func (r *streamReader) remove() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watching--
	if r.watching == 0 {
		r.stopLocked()
	}
}

func (r *streamReader) startLocked(fresh bool) {
	if fresh {
		r.last = map[string]string{}
	}
	r.fresh = fresh
	ctx, cancel := context.WithCancel(context.Background())
	r.stop, r.done = cancel, make(chan struct{})
	api := r.client()
	go r.run(ctx, api, r.done)
}

func (r *streamReader) stopLocked() {
	if r.stop != nil {
		r.stop()
		<-r.done
		r.stop = nil
	}
}

// restart stops and starts the reader keeping its positions: what a
// failure does, and what the tests do to prove nothing is lost.
func (r *streamReader) restart(between func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watching == 0 {
		return
	}
	r.stopLocked()
	if between != nil {
		between()
	}
	r.startLocked(false)
}

// run reads until ctx ends; on any error it waits a poll and starts over
// from the positions it has.
func (r *streamReader) run(ctx context.Context, api StreamsAPI, done chan struct{}) {
	defer close(done)
	for ctx.Err() == nil {
		_ = r.follow(ctx, api)
		if clock.Sleep(ctx, StreamPollEvery) != nil {
			return
		}
	}
}

func (r *streamReader) isFresh() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fresh
}

func (r *streamReader) position(shard string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seq, ok := r.last[shard]
	return seq, ok
}

func (r *streamReader) advance(shard, seq string) {
	r.mu.Lock()
	r.last[shard] = seq
	r.mu.Unlock()
}

// follow reads the table's current stream, shard by shard, until an error.
func (r *streamReader) follow(ctx context.Context, api StreamsAPI) error {
	ls, err := api.ListStreams(ctx, &dynamodbstreams.ListStreamsInput{TableName: aws.String(r.s.table)})
	if err != nil {
		return err
	}
	if len(ls.Streams) == 0 {
		return errNoStream
	}
	arn := ls.Streams[0].StreamArn
	iters := map[string]*string{}
	known := map[string]bool{}
	starting := true
	for {
		ds, err := api.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: arn})
		if err != nil {
			return err
		}
		for _, sh := range ds.StreamDescription.Shards {
			id := aws.ToString(sh.ShardId)
			if known[id] {
				continue
			}
			known[id] = true
			in := &dynamodbstreams.GetShardIteratorInput{StreamArn: arn, ShardId: sh.ShardId}
			if seq, ok := r.position(id); ok {
				in.ShardIteratorType, in.SequenceNumber = types.ShardIteratorTypeAfterSequenceNumber, aws.String(seq)
			} else if starting && r.isFresh() {
				if sh.SequenceNumberRange != nil && sh.SequenceNumberRange.EndingSequenceNumber != nil {
					continue // closed before we began: nothing new in it
				}
				in.ShardIteratorType = types.ShardIteratorTypeLatest
			} else {
				in.ShardIteratorType = types.ShardIteratorTypeTrimHorizon
			}
			it, err := api.GetShardIterator(ctx, in)
			if err != nil {
				return err
			}
			iters[id] = it.ShardIterator
		}
		if starting {
			// Every iterator is in place: a write from here on is read from
			// the stream. One made before (since the subscriber's read of
			// the store, or while a restarted reader was down, beyond what
			// the stream still holds) is covered by every waiter re-reading.
			r.s.watchers.NotifyAll()
		}
		starting = false
		for id, it := range iters {
			if it == nil {
				delete(iters, id) // the shard is closed and read to its end
				continue
			}
			out, err := api.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it})
			if err != nil {
				return err
			}
			for _, rec := range out.Records {
				if rec.Dynamodb == nil {
					continue
				}
				if pk, ok := rec.Dynamodb.Keys["pk"].(*types.AttributeValueMemberS); ok {
					if jobID, ok := strings.CutPrefix(pk.Value, "JOB#"); ok {
						r.s.watchers.Notify(jobID)
					}
				}
				r.advance(id, aws.ToString(rec.Dynamodb.SequenceNumber))
			}
			iters[id] = out.NextShardIterator
		}
		if err := clock.Sleep(ctx, StreamPollEvery); err != nil {
			return err
		}
	}
}

type streamError string

func (e streamError) Error() string { return string(e) }

const errNoStream = streamError("sitestore/dynamo: the site table has no stream")
