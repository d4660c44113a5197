package siteserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/internal/siteserver"
	"github.com/byorelay/byorelay/internal/sitestore"
	sitedynamo "github.com/byorelay/byorelay/internal/sitestore/dynamo"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
)

// sseEvent is one Server-Sent Event: its name ("" for a data event) and
// its data's text.
type sseEvent struct{ name, text string }

func sseEvents(t *testing.T, body string) []sseEvent {
	t.Helper()
	var out []sseEvent
	name := ""
	for _, line := range strings.Split(body, "\n") {
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d struct{ Text string }
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil {
				t.Fatalf("data %q: %v", line, err)
			}
			out = append(out, sseEvent{name, d.Text})
			name = ""
		}
	}
	return out
}

// A process that reads a stream checkpoints its text into the site store,
// sealed (the raw DynamoDB item holds no plaintext), and a browser that
// attaches through another process after the relay's frames are gone is
// sent the checkpointed text, then the result. The meter measures the
// checkpoint's write capacity against the characters checkpointed.
func TestALateReaderGetsTheCheckpointThenTheResult(t *testing.T) {
	db := localtest.DynamoClient(t)
	table := localtest.UniqueName("site")
	meter := &ddb.Meter{}
	w := newCloudWorldWith(t, func(clk *clock.Manual) sitestore.Store {
		if err := sitedynamo.CreateTable(context.Background(), db, table); err != nil {
			t.Fatal(err)
		}
		st, err := sitedynamo.New(sitedynamo.Config{DB: db, Table: table, Clock: clk, Meter: meter})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}, daemon.Streaming{Enabled: true})

	words := make([]string, 200)
	for i := range words {
		words[i] = fmt.Sprintf("w%03d", i)
	}
	prompt := strings.Join(words, " ")
	full := echoOf(prompt)
	sealer := w.start(nil)
	payload, _ := json.Marshal(map[string]string{"prompt": prompt})
	if _, err := sealer.Enqueue(w.ctx, siteserver.EnqueueInput{ID: "c1", Kind: protocol.KindGenerate, Payload: payload,
		Owner: "alice", Streaming: true, TTLMs: 10 * 60_000}); err != nil {
		t.Fatal(err)
	}
	w.settle(sealer, w.ended("c1"))
	w.wantVerified("c1", prompt)

	// A second process reads the stream, whole, and checkpoints it.
	meter.Reset()
	got, err := streamAll(t, w, w.start(nil), "c1")
	if err != nil || got != full {
		t.Fatalf("the reader streamed %q, %v; want %q", got, err, full)
	}
	spent := meter.Total()
	lease := w.job("c1").StreamGrant.LeaseID
	cp, ok, err := w.store.Checkpoint(w.ctx, "c1", lease)
	if err != nil || !ok || cp.Seq != int64(len(full)) {
		t.Fatalf("checkpoint after reading %d characters: seq %d, %v, %v", len(full), cp.Seq, ok, err)
	}
	t.Logf("checkpoint of %d characters: item envelope %d bytes of ciphertext; the read spent %.1f WCU, %.1f RCU in %d calls; %.2f WCU per 1,000 characters",
		len(full), len(cp.Envelope.Ciphertext), spent.WriteUnits, spent.ReadUnits, spent.Calls, spent.WriteUnits*1000/float64(len(full)))

	raw, err := db.GetItem(w.ctx, &dynamodb.GetItemInput{TableName: &table, Key: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "CKPT#c1"}, "sk": &types.AttributeValueMemberS{Value: "LEASE#" + lease}}})
	if err != nil || raw.Item == nil {
		t.Fatalf("the raw checkpoint item: %v, %v", raw, err)
	}
	dump := fmt.Sprintf("%v", raw.Item)
	for _, plain := range []string{"w042", "w199", "echo: "} {
		if strings.Contains(dump, plain) {
			t.Fatalf("the stored checkpoint holds plaintext %q: %s", plain, dump)
		}
	}

	// Past the job's deadline the relay holds no frames for it.
	w.clock.Advance(11 * time.Minute)
	var after error
	for _, err := range w.start(nil).Stream(w.ctx, "c1") {
		after = err
	}
	if after == nil {
		t.Fatal("the relay still streams the job past its deadline")
	}

	h, err := w.start(nil).StreamHandler(func(*http.Request, string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/stream?job=c1", nil))
	events := sseEvents(t, rec.Body.String())
	want := []sseEvent{{"", full}, {"result", full}}
	if len(events) != len(want) || events[0] != want[0] || events[1] != want[1] {
		t.Fatalf("a late browser was sent %+v; want the checkpoint then the result %+v", events, want)
	}
}
