package siterestart

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/byorelay/byorelay/client/daemon"
	site "github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/internal/siteserver"
	"github.com/byorelay/byorelay/internal/sitestore"
	sitedynamo "github.com/byorelay/byorelay/internal/sitestore/dynamo"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/fakellm"
	"github.com/byorelay/byorelay/localtest/peers"
	"github.com/byorelay/byorelay/protocol"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(envRole); role != "" {
		if err := runSite(); err != nil {
			fmt.Fprintf(os.Stderr, "siterestart site: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	localtest.Main(m)
}

// The moments the site is killed at, as the coordinator saw the store and
// the relay just before the kill.
const (
	beforeSeal    = "a job not yet sealed"
	afterSeal     = "a job sealed, its result not yet back"
	resultWaiting = "a result waiting at the relay"
)

var moments = []string{beforeSeal, afterSeal, resultWaiting}

// A daemon under test: started and paired to the world's relay; answer is
// the text its model gives a prompt.
type daemonKind struct {
	name  string
	start func(t *testing.T, w *peers.World) (runnerID string, answer func(prompt string) string)
}

var goDaemon = daemonKind{"go daemon", func(t *testing.T, w *peers.World) (string, func(string) string) {
	t.Helper()
	return startGoDaemon(t, w, daemon.EchoBackend{}, daemon.Streaming{})
}}

// startGoDaemon pairs a Go daemon with backend and streams to the world's
// relay and runs it until the test ends.
func startGoDaemon(t *testing.T, w *peers.World, backend daemon.Backend, streams daemon.Streaming) (string, func(string) string) {
	t.Helper()
	d := w.RunGoDaemon(t, daemon.Config{Backend: backend, Streams: streams, Concurrency: 4}, "restart-test")
	return d.Pairing().RunnerID, func(prompt string) string {
		return "echo: " + daemon.ComposePrompt(protocol.KindGenerate, protocol.GeneratePayload(prompt))
	}
}

var byollmDaemon = daemonKind{"byollm 0.1.1 daemon", func(t *testing.T, w *peers.World) (string, func(string) string) {
	t.Helper()
	_, p := w.PairDaemon(t, peers.NewModel(t, "stand-in"))
	return p.RunnerID, fakellm.Answer
}}

// jobsFromEnv is how many jobs a run publishes: a smoke's worth unless
// BYORELAY_SITERESTART_JOBS says otherwise.
func jobsFromEnv(t *testing.T) int {
	n := 10
	if v := os.Getenv(envJobs); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("%s=%q is not a positive integer", envJobs, v)
		}
	}
	return n
}

func TestASiteKilledAtAnyMomentAndRestartedLosesNoJob(t *testing.T) {
	if testing.Short() {
		t.Skip("siterestart: processes, DynamoDB Local, kills")
	}
	for _, k := range []daemonKind{goDaemon, byollmDaemon} {
		t.Run(k.name, func(t *testing.T) { runRestarts(t, k, jobsFromEnv(t)) })
	}
	t.Run("go daemon, a streaming job killed mid-stream", runStreamRestart)
}

// runStreamRestart: the site app publishes a streaming job and reads its
// live stream; it is killed with SIGKILL once it has read part of it, and
// restarted on the same site table; the new incarnation reads the stream
// to its seal, and the text it read is the job's verified result.
func runStreamRestart(t *testing.T) {
	ctx := context.Background()
	started := time.Now()
	// The relay's SSE attach, as byorelay serve serves it.
	br := peers.StartByorelayWith(t, relay.New)
	seed := rand.Text()
	w := peers.NewSeededWorld(t, br.Origin, siteID, jobOwner, seed)
	keys := w.Site.Keys
	// A word every 100 ms: about 8 s of stream.
	runnerID, answer := startGoDaemon(t, w, daemon.EchoBackend{Drip: 100 * time.Millisecond}, daemon.Streaming{Enabled: true})

	ddb := localtest.DynamoEndpoint(t)
	db := dynamodb.NewFromConfig(localtest.AWSConfig(ddb))
	table := localtest.UniqueName("siterestart")
	if err := sitedynamo.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	st, err := sitedynamo.New(sitedynamo.Config{DB: db, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logPath, outPath := filepath.Join(dir, "site.log"), filepath.Join(dir, "stream.txt")
	sp := &siteProc{t: t, dir: dir, env: []string{envRole + "=site", envSeed + "=" + seed, envRelay + "=" + br.Origin,
		envDDB + "=" + ddb, envTable + "=" + table, envJobs + "=0", envLog + "=" + logPath, envStreamOut + "=" + outPath}}
	defer sp.kill()
	sp.start()

	// lines is the log's lines of kind, by pid.
	lines := func(kind string) map[string][]string {
		out := map[string][]string{}
		if _, err := os.Stat(logPath); err != nil {
			return out
		}
		readLines(t, logPath, func(f []string) {
			if len(f) >= 2 && f[0] == kind {
				out[f[1]] = append(out[f[1]], strings.Join(f[2:], " "))
			}
		})
		return out
	}
	// Killed once the first incarnation has read a few deltas.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if d := lines("delta"); len(d) > 0 && len(d[strconv.Itoa(sp.cmd.Process.Pid)]) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(filepath.Join(dir, "site.out"))
			t.Fatalf("the site read no stream:\n%s", out)
		}
	}
	first := strconv.Itoa(sp.cmd.Process.Pid)
	sp.kill()
	if s := lines("streamed"); len(s) > 0 {
		t.Fatalf("the stream was read to its end before the kill: %v", s)
	}
	readBefore := lines("delta")[first]
	time.Sleep(200 * time.Millisecond)
	sp.start()
	second := strconv.Itoa(sp.cmd.Process.Pid)

	want := answer(streamPrompt())
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		j, found, err := st.Get(ctx, streamJob)
		if err == nil {
			j, err = siteserver.OpenAnswer(keys, j)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(outPath); err == nil && found && siteserver.FateOf(j) != "" {
			if siteserver.FateOf(j) != site.FateVerified || j.Outcome.TextOrEmpty() != want || j.Provenance.RunnerID != runnerID {
				t.Fatalf("job %s: %s %q, want verified %q", streamJob, siteserver.FateOf(j), j.Outcome.TextOrEmpty(), want)
			}
			break
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(filepath.Join(dir, "site.out"))
			t.Fatalf("the restarted site did not read the stream to its end and collect the result:\n%s", out)
		}
	}
	sp.kill()
	text, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	if string(text) != want {
		t.Fatalf("the restarted site streamed %q, want the result %q", text, want)
	}
	if s := lines("streamed"); len(s[second]) != 1 {
		t.Fatalf("the restarted incarnation did not read the stream to its end: %v", s)
	}
	summary := fmt.Sprintf("siterestart stream: killed after %d deltas (%s bytes read), restarted, read to the seal: %d characters equal to the result; wall %v",
		len(readBefore), readBefore[len(readBefore)-1], len(want), time.Since(started).Round(time.Millisecond))
	fmt.Println(summary)
	t.Log(summary)
}

func runRestarts(t *testing.T, kind daemonKind, jobs int) {
	ctx := context.Background()
	started := time.Now()
	br := peers.StartByorelay(t)
	seed := rand.Text()
	w := peers.NewSeededWorld(t, br.Origin, siteID, jobOwner, seed)
	keys := w.Site.Keys
	runnerID, answer := kind.start(t, w)

	ddb := localtest.DynamoEndpoint(t)
	db := dynamodb.NewFromConfig(localtest.AWSConfig(ddb))
	table := localtest.UniqueName("siterestart")
	if err := sitedynamo.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	// The coordinator's own view of the site table: it only reads.
	st, err := sitedynamo.New(sitedynamo.Config{DB: db, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logPath := filepath.Join(dir, "site.log")
	sp := &siteProc{t: t, dir: dir, env: []string{envRole + "=site", envSeed + "=" + seed, envRelay + "=" + br.Origin,
		envDDB + "=" + ddb, envTable + "=" + table, envJobs + "=" + strconv.Itoa(jobs), envLog + "=" + logPath}}
	defer sp.kill()
	sp.start()

	o := observer{t: t, st: st, keys: keys, origin: br.Origin, jobs: jobs}
	killed := map[string]int{}
	// Every job ends by its TTL at the latest (expired, which fails
	// below), so only a job that never ends may reach the budget: the
	// last job's TTL after its enqueue, plus time for a loaded machine's
	// restarts to enqueue them all.
	budget := time.Now().Add(jobTTL + 45*time.Second + time.Duration(jobs)*time.Second)
	for k := 0; ; k++ {
		// Aim at each moment in turn; kill when it is seen, or after a
		// while whatever the moment (then it counts as what was seen).
		target := moments[k%len(moments)]
		var seen map[string]bool
		for aim := time.Now().Add(3 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			seen = o.look()
			if seen["all ended"] || seen[target] || time.Now().After(aim) {
				break
			}
		}
		if seen["all ended"] {
			break
		}
		if time.Now().After(budget) {
			t.Fatalf("not every job ended within the budget; kills %v\n%s", killed, o.summary())
		}
		sp.kill()
		label := "another moment"
		if seen[target] {
			label = target
		} else {
			for _, m := range moments {
				if seen[m] {
					label = m
					break
				}
			}
		}
		killed[label]++
		time.Sleep(time.Duration(100+mrand.IntN(300)) * time.Millisecond)
		sp.start()
	}
	sp.kill()

	// Every job ended exactly once, verified, with the model's text.
	ends := map[string]int{}
	readLines(t, logPath, func(f []string) {
		if len(f) == 3 && f[0] == "end" {
			ends[f[1]]++
		}
	})
	verified := 0
	for i := range jobs {
		id := jobID(i)
		j, found, err := st.Get(ctx, id)
		if err == nil {
			j, err = siteserver.OpenAnswer(keys, j)
		}
		if err != nil || !found {
			t.Errorf("job %s: lost (found=%v err=%v)", id, found, err)
			continue
		}
		if ends[id] > 1 {
			t.Errorf("job %s: reported ended %d times", id, ends[id])
		}
		fate := siteserver.FateOf(j)
		switch {
		case fate != site.FateVerified:
			t.Errorf("job %s: %s (%s), want a verified result", id, fate, j.EndReason)
		case j.State != sitestore.StateOK || j.Outcome.TextOrEmpty() != answer(promptOf(id)):
			t.Errorf("job %s: %s %q, want ok %q", id, j.State, j.Outcome.TextOrEmpty(), answer(promptOf(id)))
		case j.Provenance.RunnerID != runnerID:
			t.Errorf("job %s: ran on %s, want %s", id, j.Provenance.RunnerID, runnerID)
		default:
			verified++
		}
	}
	total := 0
	for _, n := range killed {
		total += n
	}
	summary := fmt.Sprintf("siterestart %s: %d jobs, %d verified; %d site processes, %d SIGKILLs (%s %d, %s %d, %s %d, other %d); wall %v",
		kind.name, jobs, verified, sp.starts, total, beforeSeal, killed[beforeSeal], afterSeal, killed[afterSeal],
		resultWaiting, killed[resultWaiting], killed["another moment"], time.Since(started).Round(time.Millisecond))
	fmt.Println(summary)
	t.Log(summary)
	if total == 0 {
		t.Error("the site was never killed")
	}
}

// siteProc is the site app process, one incarnation at a time.
type siteProc struct {
	t      *testing.T
	dir    string
	env    []string
	cmd    *exec.Cmd
	exited chan struct{}
	starts int
}

func (p *siteProc) start() {
	p.t.Helper()
	self, err := os.Executable()
	if err != nil {
		p.t.Fatal(err)
	}
	out, err := os.OpenFile(filepath.Join(p.dir, "site.out"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	out.Close()
	p.cmd, p.exited, p.starts = cmd, make(chan struct{}), p.starts+1
	exited := p.exited
	go func() { _ = cmd.Wait(); close(exited) }()
}

// kill sends SIGKILL to the live incarnation by its pid and waits for it.
func (p *siteProc) kill() {
	if p.cmd == nil {
		return
	}
	select {
	case <-p.exited:
		// It stopped by itself: that is a failure of the site, not a kill.
		out, _ := os.ReadFile(filepath.Join(p.dir, "site.out"))
		p.t.Errorf("the site process exited on its own:\n%s", out)
	default:
		_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
	p.cmd = nil
}

// observer reads the site table and the relay's results list (a GET: the
// pure read, which collects nothing) to tell which moments are now.
type observer struct {
	t      *testing.T
	st     *sitedynamo.Store
	keys   *protocol.Keys
	origin string
	jobs   int
	last   []sitestore.Job
}

func (o *observer) look() map[string]bool {
	o.t.Helper()
	ctx := context.Background()
	waiting := o.waitingResults()
	seen := map[string]bool{}
	ended := 0
	o.last = o.last[:0]
	for i := range o.jobs {
		j, found, err := o.st.Get(ctx, jobID(i))
		if err != nil {
			o.t.Fatal(err)
		}
		if !found {
			continue
		}
		o.last = append(o.last, j)
		switch {
		case siteserver.FateOf(j) != "":
			ended++
		case waiting[j.ID]:
			seen[resultWaiting] = true
		case len(j.SealedTo) == 0:
			seen[beforeSeal] = true
		default:
			seen[afterSeal] = true
		}
	}
	seen["all ended"] = ended == o.jobs
	return seen
}

func (o *observer) waitingResults() map[string]bool {
	o.t.Helper()
	r := relaytest.SignedSiteRequest(o.t, o.keys, siteID, "results", time.Now(), nil)
	req, err := http.NewRequest(r.Method, o.origin+r.Path+"?"+r.RawQuery, nil)
	if err != nil {
		o.t.Fatal(err)
	}
	req.Header = r.Header
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		o.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		o.t.Fatalf("results: %d %s", resp.StatusCode, body)
	}
	var list protocol.SiteResultsResponse
	if err := json.Unmarshal(body, &list); err != nil {
		o.t.Fatal(err)
	}
	out := map[string]bool{}
	for _, r := range list.Jobs {
		out[r.JobID] = true
	}
	return out
}

func (o *observer) summary() string {
	var b strings.Builder
	for _, j := range o.last {
		fmt.Fprintf(&b, "%s %s sealedTo=%d awaitingPublish=%v fate=%q reason=%q\n", j.ID, j.State, len(j.SealedTo), j.AwaitingPublish, siteserver.FateOf(j), j.EndReason)
	}
	return b.String()
}

func readLines(t *testing.T, path string, each func(fields []string)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		each(strings.Fields(sc.Text()))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}
