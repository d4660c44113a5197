package streamdrop

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/chromedp/chromedp"

	"github.com/byorelay/byorelay/client/daemon"
	site "github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/siteserver"
	"github.com/byorelay/byorelay/internal/sitestore"
	sitedynamo "github.com/byorelay/byorelay/internal/sitestore/dynamo"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/peers"
	"github.com/byorelay/byorelay/protocol"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(envRole); role != "" {
		var err error
		switch role {
		case roleSealer:
			err = runSealer()
		case roleReader:
			err = runReader()
		default:
			err = fmt.Errorf("unknown role %q", role)
		}
		fmt.Fprintf(os.Stderr, "streamdrop %s: %v\n", role, err)
		os.Exit(1)
	}
	localtest.Main(m)
}

// The budget of response bytes after which the proxy cuts each of the
// first two stream connections: a few events' worth, so each cut comes
// after some text and long before the answer's end.
const (
	cutBudget = 400
	cutCount  = 2
)

func TestBrowserReadsWholeStreamPastDropsAndLostFrames(t *testing.T) {
	if testing.Short() {
		t.Skip("streamdrop: processes, DynamoDB Local, Chromium")
	}
	began := time.Now()
	browser := localtest.Browser(t)
	ctx := context.Background()

	// The relay, its SSE attach served as byorelay serve serves it.
	br := peers.StartByorelayWith(t, relay.New)
	seed := rand.Text()
	w := peers.NewSeededWorld(t, br.Origin, siteID, jobOwner, seed)
	keys := w.Site.Keys
	// A word every 100 ms: the answer streams for about 12 s, long
	// enough for two cuts and EventSource's reconnection delay after each.
	startDaemon(t, w, daemon.EchoBackend{Drip: 100 * time.Millisecond})

	ddb := localtest.DynamoEndpoint(t)
	db := dynamodb.NewFromConfig(localtest.AWSConfig(ddb))
	table := localtest.UniqueName("streamdrop")
	if err := sitedynamo.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	st, err := sitedynamo.New(sitedynamo.Config{DB: db, Table: table})
	if err != nil {
		t.Fatal(err)
	}

	words := make([]string, 120)
	for i := range words {
		words[i] = fmt.Sprintf("w%03d", i)
	}
	// Characters outside the BMP too, so the offsets are UTF-16's.
	prompt := strings.Join(words, " ") + " 🎉 done"
	jobID := "drop-1"
	full := "echo: " + daemon.ComposePrompt(protocol.KindGenerate, protocol.GeneratePayload(prompt))
	token := rand.Text()
	dir := t.TempDir()
	addrFile := filepath.Join(dir, "reader.addr")
	env := []string{envSeed + "=" + seed, envRelay + "=" + br.Origin, envDDB + "=" + ddb, envTable + "=" + table,
		envJob + "=" + jobID, envPrompt + "=" + prompt, envToken + "=" + token, envAddr + "=" + addrFile}

	reader := startProc(t, dir, roleReader, env)
	var addr string
	for deadline := time.Now().Add(30 * time.Second); addr == ""; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the reader process wrote no address:\n%s", reader.output())
		}
		b, _ := os.ReadFile(addrFile)
		addr = string(b)
	}
	proxy := startProxy(t, addr, cutBudget, cutCount)
	sealer := startProc(t, dir, roleSealer, env)

	// The page is opened once the job is in the store (a job the store
	// does not hold is a 404, which EventSource does not retry), before
	// it is sealed or has streamed a word.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, found, err := st.Get(ctx, jobID); err != nil {
			t.Fatal(err)
		} else if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sealer enqueued nothing:\n%s", sealer.output())
		}
	}
	pageURL := proxy.url() + "/?job=" + jobID + "&token=" + token
	tab, cancel := context.WithTimeout(browser, 90*time.Second)
	defer cancel()
	if _, err := chromedp.Run(tab, chromedp.Navigate(pageURL)); err != nil {
		t.Fatal(err)
	}
	status := waitStatus(t, tab, 75*time.Second, proxy, sealer, reader)
	streamed := evaluate[string](t, tab, `window.streamed`)
	shown := evaluate[string](t, tab, `document.getElementById('answer').textContent`)
	events := evaluate[[]string](t, tab, `window.events`)
	conns := proxy.seen()
	if status != "end" {
		t.Fatalf("the page ended %q; events %q; connections %+v", status, events, summary(conns))
	}
	if streamed != full || shown != full {
		t.Fatalf("the page streamed %q and shows %q; want exactly %q", streamed, shown, full)
	}
	// Two connections cut mid-stream (text passed on, no terminal yet),
	// each followed by a reconnection carrying the offset the page held.
	cuts := 0
	for i, c := range conns {
		if !c.cut {
			continue
		}
		cuts++
		if !strings.Contains(c.body, "data: ") || strings.Contains(c.body, "event: ") {
			t.Fatalf("connection %d was not cut mid-stream: %q", i, c.body)
		}
		if i+1 >= len(conns) {
			t.Fatalf("no reconnection after cut %d", i)
		}
		// The id names the run (the lease) and the offset in it.
		run, offset, named := strings.Cut(conns[i+1].lastEventID, ":")
		next, err := strconv.Atoi(offset)
		if !named || run == "" || err != nil || next <= 0 || next >= len(utf16Of(full)) {
			t.Fatalf("the reconnection after cut %d sent Last-Event-ID %q", i, conns[i+1].lastEventID)
		}
	}
	if cuts != cutCount || conns[0].lastEventID != "" {
		t.Fatalf("%d connections cut, want %d: %+v", cuts, cutCount, summary(conns))
	}
	errorsSeen := 0
	for _, e := range events {
		if e == "error" {
			errorsSeen++
		}
	}
	if errorsSeen < cutCount {
		t.Fatalf("the page saw %d lost connections, want %d: %q", errorsSeen, cutCount, events)
	}
	streamedAt := time.Since(began)

	// The sealer's pump collects the result (the relay passed the seal
	// once the result was stored there), and the reader checkpointed what
	// it read, sealed.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		j, found, err := st.Get(ctx, jobID)
		if err == nil {
			j, err = siteserver.OpenAnswer(keys, j)
		}
		if err != nil {
			t.Fatal(err)
		}
		fate := siteserver.FateOf(j)
		if found && fate == site.FateVerified && j.Outcome.TextOrEmpty() == full {
			break
		}
		if fate != "" || time.Now().After(deadline) {
			t.Fatalf("job %s: %s %s %q; want verified with the streamed text", jobID, j.State, fate, j.Outcome.TextOrEmpty())
		}
	}
	j, _, err := st.Get(ctx, jobID)
	if err != nil || j.StreamGrant == nil {
		t.Fatalf("no stream grant: %v", err)
	}
	cp, ok, err := st.Checkpoint(ctx, jobID, j.StreamGrant.LeaseID)
	if err != nil || !ok {
		t.Fatalf("no checkpoint: %v", err)
	}
	checkpointed := openCheckpoint(t, keys, jobID, j.StreamGrant.LeaseID, cp)

	// The relay's frames go (as its TTL and the end sweep delete them):
	// a fresh page is served the checkpoint, then the result.
	gone := deleteStreams(t, db, br.Stack.Env.TableName)
	if _, err := chromedp.Run(tab, chromedp.Navigate(pageURL)); err != nil {
		t.Fatal(err)
	}
	status = waitStatus(t, tab, 75*time.Second, proxy, sealer, reader)
	forms := evaluate[[]string](t, tab, `window.forms`)
	events = evaluate[[]string](t, tab, `window.events`)
	if status != "result" || len(forms) != 2 || forms[0] != checkpointed || forms[1] != full ||
		len(events) != 2 || !strings.HasPrefix(events[0], "data ") || events[1] != "result" {
		t.Fatalf("after the frames were gone the page ended %q with forms %q, events %q; want the checkpoint %q, then the result",
			status, forms, events, checkpointed)
	}
	t.Logf("%d characters through %d cut connections (Last-Event-ID %s); %d relay stream items deleted, then the checkpoint (%d) and the result; streamed in %v, whole test %v",
		len(utf16Of(full)), cuts, lastIDs(conns), gone, cp.Seq, streamedAt.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// evaluate is the value of a script on the page.
func evaluate[T any](t *testing.T, tab context.Context, script string) T {
	t.Helper()
	v, err := chromedp.Run(tab, chromedp.Evaluate[T](script))
	if err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	return v
}

func utf16Of(s string) []uint16 {
	var out []uint16
	for _, r := range s {
		if r > 0xFFFF {
			out = append(out, 0, 0)
		} else {
			out = append(out, 0)
		}
	}
	return out
}

func summary(conns []streamConn) []string {
	var out []string
	for _, c := range conns {
		out = append(out, fmt.Sprintf("{Last-Event-ID %q cut %v, %d bytes}", c.lastEventID, c.cut, len(c.body)))
	}
	return out
}

func lastIDs(conns []streamConn) string {
	var ids []string
	for _, c := range conns {
		ids = append(ids, strconv.Quote(c.lastEventID))
	}
	return strings.Join(ids, ", ")
}

// waitStatus waits for the page to show a final status.
func waitStatus(t *testing.T, tab context.Context, limit time.Duration, proxy *dropProxy, procs ...*proc) string {
	t.Helper()
	var status string
	for deadline := time.Now().Add(limit); ; time.Sleep(100 * time.Millisecond) {
		status = evaluate[string](t, tab, `document.getElementById('status').textContent`)
		if status != "streaming" {
			return status
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, p := range procs {
				logs.WriteString(p.output())
			}
			t.Fatalf("the page still streams after %v; events %q; connections %q\n%s", limit,
				evaluate[[]string](t, tab, `window.events`), summary(proxy.seen()), logs.String())
		}
	}
}

// openCheckpoint opens the stored checkpoint as the site does: sealed by
// the site to itself, direction result, bound to the job id, and holding
// the lease whose run it is beside the text.
func openCheckpoint(t *testing.T, keys *protocol.Keys, jobID, leaseID string, cp sitestore.Checkpoint) string {
	t.Helper()
	self := keys.KeyID()
	plain, err := protocol.Open(cp.Envelope, keys, keys.Public().Identity, protocol.ExpectedEnvelope{
		JobID: jobID, SenderKeyID: self, RecipientKeyID: self, Direction: protocol.DirectionResult})
	if err != nil {
		t.Fatalf("the checkpoint does not open: %v", err)
	}
	var content struct{ LeaseID, Text string }
	if err := json.Unmarshal([]byte(plain), &content); err != nil || content.LeaseID != leaseID {
		t.Fatalf("the checkpoint holds lease %q, want %q: %v", content.LeaseID, leaseID, err)
	}
	text := content.Text
	if int64(len(utf16Of(text))) != cp.Seq {
		t.Fatalf("checkpoint of %d units at seq %d", len(utf16Of(text)), cp.Seq)
	}
	return text
}

// deleteStreams deletes every stream item (header and frames) from the
// relay's table and says how many.
func deleteStreams(t *testing.T, db *dynamodb.Client, table string) int {
	t.Helper()
	ctx := context.Background()
	n := 0
	var start map[string]types.AttributeValue
	for {
		out, err := db.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(table), ExclusiveStartKey: start,
			FilterExpression:          aws.String("begins_with(pk, :p)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: "S#"}},
			ProjectionExpression:      aws.String("pk, sk")})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range out.Items {
			if _, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: it}); err != nil {
				t.Fatal(err)
			}
			n++
		}
		if start = out.LastEvaluatedKey; start == nil {
			break
		}
	}
	if n == 0 {
		t.Fatal("the relay's table held no stream items")
	}
	return n
}

// startDaemon pairs a streaming Go daemon with backend to the world's
// relay and runs it until the test ends.
func startDaemon(t *testing.T, w *peers.World, backend daemon.Backend) {
	t.Helper()
	w.RunGoDaemon(t, daemon.Config{Backend: backend, Streams: daemon.Streaming{Enabled: true}}, "streamdrop")
}

// proc is one site process: the test binary in a role.
type proc struct {
	cmd  *exec.Cmd
	path string
}

func startProc(t *testing.T, dir, role string, env []string) *proc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, role+".out")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(append(os.Environ(), env...), envRole+"="+role)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out.Close()
	t.Cleanup(func() { _ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	return &proc{cmd: cmd, path: path}
}

func (p *proc) output() string {
	b, _ := os.ReadFile(p.path)
	return fmt.Sprintf("--- %s\n%s", filepath.Base(p.path), b)
}
