package streamdrop

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/byorelay/byorelay/client/daemon"
	site "github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/siteserver"
	sitedynamo "github.com/byorelay/byorelay/internal/sitestore/dynamo"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/peers"
	"github.com/byorelay/byorelay/protocol"
)

// stampingBackend is the echo backend (a word every Drip) that notes
// when it hands its first token of each prompt to the daemon.
type stampingBackend struct {
	daemon.EchoBackend
	mu    sync.Mutex
	first map[string]time.Time
}

func (b *stampingBackend) RunStream(ctx context.Context, prompt string, delta func(string)) (daemon.Answer, error) {
	return b.EchoBackend.RunStream(ctx, prompt, func(d string) {
		b.mu.Lock()
		if _, ok := b.first[prompt]; !ok {
			b.first[prompt] = time.Now()
		}
		b.mu.Unlock()
		delta(d)
	})
}

func (b *stampingBackend) firstToken(prompt string) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	at, ok := b.first[prompt]
	return at, ok
}

// envFirstTextJobs is how many streams the measurement reads (5 unless
// set).
const envFirstTextJobs = "BYORELAY_FIRSTTEXT_JOBS"

// Time to first text through the relay against the backend's own first
// token, and the checkpoint's write cost per 1,000 characters, in one run
// (docs/streaming.md): N streaming jobs one after another through the
// relay on DynamoDB Local (its SSE attach) from a Go daemon (default
// FlushEvery) whose echo backend stamps its first token, each read whole
// by a site process on the site table that does nothing else, so its
// store's meter counts only the reader's own calls: the checkpoint
// writes, and the grant and checkpoint reads.
func TestTimeToFirstTextAndTheCheckpointCost(t *testing.T) {
	if testing.Short() {
		t.Skip("streamdrop: DynamoDB Local, timing")
	}
	jobs := 5
	if v := os.Getenv(envFirstTextJobs); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q is not a positive integer", envFirstTextJobs, v)
		}
		jobs = n
	}
	ctx := context.Background()
	br := peers.StartByorelayWith(t, relay.New)
	w := peers.NewSeededWorld(t, br.Origin, siteID, jobOwner, rand.Text())
	keys := w.Site.Keys
	backend := &stampingBackend{EchoBackend: daemon.EchoBackend{Drip: 5 * time.Millisecond}, first: map[string]time.Time{}}
	startDaemon(t, w, backend)

	db := dynamodb.NewFromConfig(localtest.AWSConfig(localtest.DynamoEndpoint(t)))
	table := localtest.UniqueName("firsttext")
	if err := sitedynamo.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	open := func(meter *ddb.Meter) *siteserver.Server {
		st, err := sitedynamo.New(sitedynamo.Config{DB: db, Table: table, Meter: meter})
		if err != nil {
			t.Fatal(err)
		}
		s, err := siteserver.New(siteserver.Config{Store: st, Keys: keys, Cloud: &siteserver.CloudLane{RelayURL: br.Origin, SiteID: siteID}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	sealer := open(nil)
	meter := &ddb.Meter{}
	reader := open(meter)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = sealer.Run(runCtx, 50*time.Millisecond, func(site.Report) {}) }()

	var gaps, toFirst []time.Duration
	chars := 0
	for i := range jobs {
		words := make([]string, 200)
		for k := range words {
			words[k] = fmt.Sprintf("j%02dw%03d", i, k)
		}
		prompt := strings.Join(words, " ")
		want := "echo: " + daemon.ComposePrompt(protocol.KindGenerate, protocol.GeneratePayload(prompt))
		id := fmt.Sprintf("ft-%03d", i)
		published := time.Now()
		if _, err := sealer.Enqueue(ctx, siteserver.EnqueueInput{ID: id, Kind: protocol.KindGenerate,
			Payload: []byte(fmt.Sprintf(`{"prompt":%q}`, prompt)), Owner: jobOwner, Streaming: true,
			TTLMs: (5 * time.Minute).Milliseconds()}); err != nil {
			t.Fatal(err)
		}
		var got strings.Builder
		var firstText time.Time
		var last error
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			for delta, err := range reader.Stream(ctx, id) {
				if delta != "" && firstText.IsZero() {
					firstText = time.Now()
				}
				got.WriteString(delta)
				last = err
			}
			// Absent until the sealer has sealed the job to the device.
			if last != site.ErrStreamAbsent || got.Len() > 0 || time.Now().After(deadline) {
				break
			}
		}
		if last != nil || got.String() != want {
			t.Fatalf("job %s streamed %d characters, %v; want %d", id, got.Len(), last, len(want))
		}
		token, ok := backend.firstToken(prompt)
		if !ok {
			t.Fatalf("job %s: the backend stamped no first token", id)
		}
		gaps = append(gaps, firstText.Sub(token))
		toFirst = append(toFirst, firstText.Sub(published))
		chars += len(want) // ASCII: characters, bytes and UTF-16 units alike
	}
	spent := meter.Total()
	slices.Sort(gaps)
	slices.Sort(toFirst)
	median := func(d []time.Duration) time.Duration {
		if len(d)%2 == 1 {
			return d[len(d)/2]
		}
		return (d[len(d)/2-1] + d[len(d)/2]) / 2
	}
	t.Logf("first text at the site reader after the backend's first token over %d streams: median %v (min %v, max %v); publish to first text median %v",
		jobs, median(gaps).Round(time.Millisecond), gaps[0].Round(time.Millisecond), gaps[len(gaps)-1].Round(time.Millisecond), median(toFirst).Round(time.Millisecond))
	t.Logf("the reader's store spent %.1f WCU (checkpoint writes) and %.1f RCU in %d calls for %d characters: %.2f WCU per 1,000 characters",
		spent.WriteUnits, spent.ReadUnits, spent.Calls, chars, spent.WriteUnits*1000/float64(chars))
	if spent.WriteUnits == 0 {
		t.Fatal("the reader wrote no checkpoint")
	}
}
