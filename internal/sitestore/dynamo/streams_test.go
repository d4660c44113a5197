package dynamo

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/internal/sitestore/sitestoretest"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
)

// streamReplica is a store with its own clients, its Subscribe reading the
// table's stream: another process.
func streamReplica(t *testing.T, table string) *Store {
	t.Helper()
	cfg := localtest.AWSConfig(localtest.DynamoEndpoint(t))
	s, err := New(Config{DB: localtest.DynamoClient(t), Table: table, AWS: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func streamJob(id string) sitestore.CreateInput {
	return sitestore.CreateInput{ID: id, Kind: protocol.KindGenerate, Envelope: testEnvelope(id), SizeClass: "small", Owner: "alice"}
}

// heard waits for one signal within the stated bound.
func heard(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(StreamHeardWithin):
		t.Fatalf("%s was not heard within %v", what, StreamHeardWithin)
	}
}

func drain(ch chan struct{}) {
	for len(ch) > 0 {
		<-ch
	}
}

// A write through one store is heard by a Subscribe on another store (its
// own clients: another process) through the table's stream, within
// StreamHeardWithin.
func TestSubscribeHearsAnotherProcessThroughTheStream(t *testing.T) {
	table := newTable(t)
	writer, listener := streamReplica(t, table), streamReplica(t, table)
	ctx := context.Background()
	if _, err := writer.Create(ctx, streamJob("a")); err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{}, 64)
	stop := listener.Subscribe("a", func() { ch <- struct{}{} })
	defer stop()
	// The reader notifies once when its iterators are in place.
	heard(t, ch, "the reader's start")
	drain(ch)
	if _, found, err := writer.Cancel(ctx, "a"); err != nil || !found {
		t.Fatalf("cancel: %v %v", found, err)
	}
	heard(t, ch, "another store's cancel")
	j, found, err := listener.Get(ctx, "a")
	if err != nil || !found || !j.Terminal() {
		t.Fatalf("after the signal the listener reads %+v %v %v", j, found, err)
	}
}

// The reader is stopped, a write is made, and it is started again: it
// resumes each shard after the last sequence number it read, so the write
// is heard, not lost; and a write to a job nobody watches wakes nobody.
func TestARestartedStreamReaderRereadsWhatItMissed(t *testing.T) {
	table := newTable(t)
	writer, listener := streamReplica(t, table), streamReplica(t, table)
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if _, err := writer.Create(ctx, streamJob(id)); err != nil {
			t.Fatal(err)
		}
	}
	ch := make(chan struct{}, 64)
	stop := listener.Subscribe("a", func() { ch <- struct{}{} })
	defer stop()
	heard(t, ch, "the reader's start")
	// One record read, so the shard has a position to resume from.
	if _, _, err := writer.Cancel(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(StreamHeardWithin)
	for {
		listener.reader.mu.Lock()
		n := len(listener.reader.last)
		listener.reader.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reader read no record")
		}
		time.Sleep(20 * time.Millisecond)
	}
	drain(ch)
	positions := func() map[string]string {
		listener.reader.mu.Lock()
		defer listener.reader.mu.Unlock()
		return maps.Clone(listener.reader.last)
	}
	before := positions()
	listener.reader.restart(func() {
		if _, _, err := writer.Cancel(ctx, "a"); err != nil {
			t.Fatal(err)
		}
	})
	heard(t, ch, "a write made while the reader was down")
	// The start's own notice would be heard even by a reader that began at
	// the latest record: the record itself must be read from the stream.
	resumeBy := time.Now().Add(StreamHeardWithin)
	for maps.Equal(positions(), before) {
		if time.Now().After(resumeBy) {
			t.Fatal("the restarted reader never read the record written while it was down")
		}
		time.Sleep(20 * time.Millisecond)
	}
	j, _, err := listener.Get(ctx, "a")
	if err != nil || !j.Terminal() {
		t.Fatalf("after the restart the listener reads %+v %v", j, err)
	}
}

// The contract suite, with Subscribe reading the table's stream as well.
func TestDynamoStoreWithTableStreamsPassesTheSuite(t *testing.T) {
	sitestoretest.Run(t, sitestoretest.Harness{
		New: func(t *testing.T, clk *clock.Manual) sitestore.Store {
			cfg := localtest.AWSConfig(localtest.DynamoEndpoint(t))
			s, err := New(Config{DB: localtest.DynamoClient(t), Table: newTable(t), Clock: clk, AWS: &cfg})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}

func testEnvelope(id string) protocol.SealedEnvelope {
	return protocol.SealedEnvelope{Ciphertext: "c-" + id, RecipientKeyID: "site", SenderKeyID: "site",
		Direction: protocol.DirectionPayload, DeadlineAt: time.Now().UnixMilli() + protocol.EnvelopeMaxAgeMs}
}
