package sitepump

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/byorelay/byorelay/client/daemon"
	site "github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/lambdafn"
	"github.com/byorelay/byorelay/internal/sitefn"
	"github.com/byorelay/byorelay/internal/sitepump"
	"github.com/byorelay/byorelay/internal/siteserver"
	"github.com/byorelay/byorelay/internal/sitestore"
	sitedynamo "github.com/byorelay/byorelay/internal/sitestore/dynamo"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/apiserver"
	"github.com/byorelay/byorelay/localtest/fakellm"
	"github.com/byorelay/byorelay/localtest/peers"
	"github.com/byorelay/byorelay/protocol"
)

// The environment of a pump invocation's process (TestMain runs it).
const (
	envRole     = "BYORELAY_SITEPUMP_ROLE" // "pump"
	envSeed     = "BYORELAY_SITEPUMP_SEED"
	envRelay    = "BYORELAY_SITEPUMP_RELAY"
	envDDB      = "BYORELAY_SITEPUMP_DDB"
	envTable    = "BYORELAY_SITEPUMP_TABLE"
	envEmulator = "BYORELAY_SITEPUMP_EMULATOR"
	envEvent    = "BYORELAY_SITEPUMP_EVENT"
	envLog      = "BYORELAY_SITEPUMP_LOG"
	// envJobs and envIdle: how many jobs, and how long the idle watch
	// lasts (the long variant: `make site-pump`).
	envJobs = "BYORELAY_SITEPUMP_JOBS"
	envIdle = "BYORELAY_SITEPUMP_IDLE"
	// envKeep, when set, is a directory that keeps the invocations' log
	// (pump.log) and output (pump.out) after the run.
	envKeep = "BYORELAY_SITEPUMP_KEEP"

	siteID   = "site-pump"
	jobOwner = peers.Owner
	jobTTL   = 3 * time.Minute
	// The pump's figures in this test: its cadence, a budget far below
	// the deployed one so invocations hand over during the run, and the
	// wake-up period. The local scheduler honours a wake-up period under
	// Scheduler's minute; the idle assertion is stated in it.
	pumpEvery  = 1 * time.Second
	pumpBudget = 8 * time.Second
	wakeAfter  = 6 * time.Second
)

func TestMain(m *testing.M) {
	if os.Getenv(envRole) == "pump" {
		if err := runPump(); err != nil {
			fmt.Fprintf(os.Stderr, "sitepump invocation: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	localtest.Main(m)
}

// cloudEnv is the site stack's cloud-lane environment, as
// site-template.yaml gives every function.
func cloudEnv(table, relay string) sitefn.Env {
	return sitefn.Env{TableName: table, RelayURL: relay, SiteID: siteID,
		PumpEveryMs: pumpEvery.Milliseconds(), PumpBudgetMs: pumpBudget.Milliseconds(), PumpWakeAfterMs: wakeAfter.Milliseconds()}
}

// runPump is one pump invocation: the deployed wiring (sitefn), its
// triggers posting back to the emulator, its log to the shared file.
func runPump() error {
	keys, err := peers.SiteKeys(os.Getenv(envSeed))
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(os.Getenv(envLog), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	log := slog.New(slog.NewJSONHandler(logf, nil)).With(slog.Int("pid", os.Getpid()))
	em := os.Getenv(envEmulator)
	st, err := sitefn.Open(cloudEnv(os.Getenv(envTable), os.Getenv(envRelay)), sitefn.Options{
		DB: dynamodb.NewFromConfig(localtest.AWSConfig(os.Getenv(envDDB))), Keys: keys, Logger: log,
		Starter: HTTPStarter{URL: em}, Waker: HTTPWaker{URL: em}})
	if err != nil {
		return err
	}
	h, err := st.PumpHandler()
	if err != nil {
		return err
	}
	var ev sitepump.Event
	if err := json.Unmarshal([]byte(os.Getenv(envEvent)), &ev); err != nil {
		return err
	}
	rep, err := h(context.Background(), ev)
	b, _ := json.Marshal(rep)
	log.Info("pump returned", slog.String("report", string(b)), slog.Any("error", err))
	return err
}

// inProcessStarter is the app function's starter: the emulator's invoke.
type inProcessStarter struct{ em *Emulator }

func (s inProcessStarter) Start(_ context.Context, ev sitepump.Event) error { return s.em.Invoke(ev) }

type inProcessWaker struct{ em *Emulator }

func (w inProcessWaker) Wake(_ context.Context, at time.Time) error { w.em.Wake(at); return nil }

// relayEnv is the test relay's table settings: the same sharded code
// paths as the defaults (every per-site read fans over more than one
// shard, a site change writes more than one copy) at counts DynamoDB Local
// serves in time on a shared machine. At the defaults (256 copies, 16 and
// 64 shards) one pending poll there is 16 Queries and one results poll
// up to 129, each tens to hundreds of milliseconds under load, and a site
// registration can outlast the admin function's 10 s timeout; a deployed
// table serves those fan-outs concurrently in a few milliseconds.
func relayEnv() lambdafn.Env {
	return lambdafn.Env{SiteCopies: 8, UnsealedShards: 4, FinishedShards: 4}
}

func intFromEnv(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q is not a positive integer", name, v)
	}
	return n
}

// TestACloudLaneSiteAsFunctionsOnly: the site stack on the cloud lane, as
// functions alone: the app function behind the local API server, and the
// pump function invoked (as processes) by the app's enqueue, by its own
// hand-overs and by the wake-ups it arms. 50 jobs (make site-pump; 12 in
// the suite) go through byorelay's relay (its function stack behind the
// local API server) to the real byollm 0.1.1 daemon and the Go daemon at
// once; invocations are killed with SIGKILL at least 5 times (3 in the
// suite), aimed at moments when the relay holds a claim the site has not
// sealed. Every job ends once, verified, with the model's text of the
// daemon that ran it. Seals that missed the relay's awaiting window are
// counted and each such job is shown finished. With a budget of 8 s,
// invocations hand over mid-job. After the last job no invocation starts
// for the idle watch but at most one wake-up.
func TestACloudLaneSiteAsFunctionsOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("sitepump: processes, DynamoDB Local, real daemons, kills")
	}
	ctx := context.Background()
	started := time.Now()
	// The suite's smoke: 12 jobs, at least 3 kills; make site-pump: the
	// issue's 50 jobs and at least 5 kills.
	// The killer stops at maxKills, so that the invocations after it may
	// live out their budget and hand over: the smoke's dozen jobs end in
	// about the time eight kills take, and no pump would reach its budget.
	jobs, wantKills, maxKills := intFromEnv(t, envJobs, 12), int32(3), int32(4)
	if os.Getenv(envJobs) != "" {
		wantKills, maxKills = 5, 8
	}
	idleWatch := time.Duration(intFromEnv(t, envIdle, int(2*wakeAfter/time.Second+2))) * time.Second

	br := peers.StartByorelayEnv(t, relayEnv())
	seed := rand.Text()
	w := peers.NewSeededWorld(t, br.Origin, siteID, jobOwner, seed)
	keys := w.Site.Keys
	// Both daemons at once; each job's text is its runner's model's.
	answers := map[string]func(string) string{}
	_, byollm := w.PairDaemon(t, peers.NewModel(t, "stand-in"))
	answers[byollm.RunnerID] = fakellm.Answer
	gd := w.RunGoDaemon(t, daemon.Config{Backend: slowEcho{perWord: 40 * time.Millisecond}, Concurrency: 4}, "pump-test")
	answers[gd.Pairing().RunnerID] = func(prompt string) string {
		return "echo: " + daemon.ComposePrompt(protocol.KindGenerate, protocol.GeneratePayload(prompt))
	}

	ddb := localtest.DynamoEndpoint(t)
	db := dynamodb.NewFromConfig(localtest.AWSConfig(ddb))
	table := localtest.UniqueName("sitepump")
	if err := sitedynamo.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if keep := os.Getenv(envKeep); keep != "" {
		dir = keep
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	logPath := filepath.Join(dir, "pump.log")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Lambda's retries of a failed asynchronous invocation, at the scale
	// of the wake-up period (a minute deployed).
	em := &Emulator{MaxRetries: 2, RetryAfter: wakeAfter}
	emSrv := httptest.NewServer(em)
	t.Cleanup(emSrv.Close)
	em.Command = func(event []byte) *exec.Cmd {
		cmd := exec.Command(self)
		cmd.Env = Environ(envRole+"=pump", envSeed+"="+seed, envRelay+"="+br.Origin, envDDB+"="+ddb, envTable+"="+table,
			envEmulator+"="+emSrv.URL, envEvent+"="+string(event), envLog+"="+logPath)
		out, _ := os.OpenFile(filepath.Join(dir, "pump.out"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		cmd.Stdout, cmd.Stderr = out, out
		return cmd
	}
	t.Cleanup(em.Stop)

	// The app function, behind the local API server.
	app, err := sitefn.Open(cloudEnv(table, br.Origin), sitefn.Options{DB: db, Keys: keys,
		Logger: slog.New(slog.DiscardHandler), Starter: inProcessStarter{em}, Waker: inProcessWaker{em}})
	if err != nil {
		t.Fatal(err)
	}
	api, err := apiserver.ForSiteStack(app, apiserver.Config{})
	if err != nil {
		t.Fatal(err)
	}
	appSrv := httptest.NewServer(api)
	t.Cleanup(appSrv.Close)
	st := app.Store

	// A daemon's claim route, /byollm/claim, is not this site's on the
	// cloud lane: it says so.
	if code, body := postJSON(t, appSrv.URL+"/byollm/claim", `{}`); code != http.StatusNotFound || !strings.Contains(body, "relay") {
		t.Errorf("POST /byollm/claim on the cloud lane: %d %s, want 404 saying the site uses a relay", code, body)
	}

	// Kill invocations while jobs are in flight, from the first enqueue
	// on: aim at a claim the relay holds unsealed (between a claim and its
	// seal), and after three of those at whatever runs.
	var kills, killsAtClaim atomic.Int32
	stopKilling := make(chan struct{})
	killerDone := make(chan struct{})
	go func() {
		defer close(killerDone)
		for kills.Load() < maxKills {
			select {
			case <-stopKilling:
				return
			case <-time.After(50 * time.Millisecond):
			}
			running := em.Running()
			awaiting, err := br.Stack.Store.Awaiting(ctx, siteID)
			if err != nil || len(running) == 0 || (len(awaiting) == 0 && kills.Load() < 3) {
				continue
			}
			em.Kill(running[len(running)-1])
			kills.Add(1)
			if len(awaiting) > 0 {
				killsAtClaim.Add(1)
			}
			select {
			case <-stopKilling:
				return
			case <-time.After(1500 * time.Millisecond):
			}
		}
	}()

	// The long job goes first: it runs past the pump's budget.
	ids := make([]string, jobs)
	for i := range ids {
		ids[i] = fmt.Sprintf("job-%03d", i)
	}
	prompts := map[string]string{}
	enqueued := map[string]time.Time{}
	for i, id := range ids {
		prompts[id] = "pump test " + id + ": say something"
		if i == 0 {
			// Long at the Go daemon's pace: about 12 s for its words.
			prompts[id] = strings.Repeat("word ", 300)
		}
		body := fmt.Sprintf(`{"id":%q,"kind":"llm.generate","payload":{"prompt":%q},"owner":%q,"ttlMs":%d}`,
			id, prompts[id], jobOwner, jobTTL.Milliseconds())
		if code, resp := postJSON(t, appSrv.URL+"/app/enqueue", body); code != http.StatusOK {
			t.Fatalf("enqueue %s: %d %s", id, code, resp)
		}
		enqueued[id] = time.Now()
		if i%10 == 9 {
			// Some quiet between bursts, so kills land with no enqueue
			// following to start a pump: the wake-up replaces it.
			time.Sleep(2 * time.Second)
		} else {
			time.Sleep(150 * time.Millisecond)
		}
	}

	budget := time.Now().Add(jobTTL)
	for {
		done := 0
		for _, id := range ids {
			j, found, err := st.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if found && j.Ended() {
				done++
			}
		}
		if done == len(ids) {
			break
		}
		if time.Now().After(budget) {
			t.Fatalf("%d of %d jobs ended within %v; kills %d\n%s", done, len(ids), jobTTL, kills.Load(), tail(logPath))
		}
		time.Sleep(100 * time.Millisecond)
	}
	lastEnd := time.Now()
	close(stopKilling)
	<-killerDone

	// Every job ended once, verified, with its runner's model's text.
	ends := map[string]int{}
	var late []string
	handOvers := 0
	readLog(t, logPath, func(rec map[string]any) {
		switch rec["msg"] {
		case "job ended":
			ends[fmt.Sprint(rec["job"])]++
		case "seal missed the relay's awaiting window; the relay offers the job again":
			late = append(late, fmt.Sprint(rec["job"]))
		case "pump returned":
			if strings.Contains(fmt.Sprint(rec["report"]), sitepump.StoppedHandedOver) {
				handOvers++
			}
		}
	})
	verified, unheard := 0, 0
	var longJob sitestore.Job
	for _, id := range ids {
		j, found, err := st.Get(ctx, id)
		if err == nil {
			j, err = siteserver.OpenAnswer(keys, j)
		}
		if err != nil || !found {
			t.Errorf("job %s: lost (found=%v err=%v)", id, found, err)
			continue
		}
		// An ending whose write landed while its invocation was stopped
		// or killed is the store's without a log line; two lines would be
		// a job ended twice.
		if ends[id] > 1 {
			t.Errorf("job %s: ended %d times in the invocations' logs, want once", id, ends[id])
		}
		if ends[id] == 0 {
			unheard++
		}
		answer, known := answers[runnerOf(j)]
		switch {
		case siteserver.FateOf(j) != site.FateVerified:
			t.Errorf("job %s: %s (%s), want a verified result", id, siteserver.FateOf(j), j.EndReason)
		case !known:
			t.Errorf("job %s: ran on %q, a runner of neither daemon", id, runnerOf(j))
		case j.State != sitestore.StateOK || j.Outcome.TextOrEmpty() != answer(prompts[id]):
			t.Errorf("job %s: %s %q, want ok %q", id, j.State, j.Outcome.TextOrEmpty(), answer(prompts[id]))
		default:
			verified++
		}
		if id == ids[0] {
			longJob = j
		}
	}
	for _, id := range slices.Compact(slices.Sorted(slices.Values(late))) {
		if j, _, _ := st.Get(ctx, id); siteserver.FateOf(j) != site.FateVerified {
			t.Errorf("job %s: its seal missed a window and it did not finish verified (%s)", id, siteserver.FateOf(j))
		}
	}
	if kills.Load() < wantKills {
		t.Errorf("%d kills, want at least %d", kills.Load(), wantKills)
	}
	if killsAtClaim.Load() == 0 {
		t.Error("no kill landed while the relay held an unsealed claim")
	}
	longRan := time.UnixMilli(longJob.UpdatedAt).Sub(enqueued[ids[0]])
	// The long job, run by the Go daemon at its drip, outlives any one
	// invocation's budget, so some invocation lives out its budget and
	// hands over; the byollm daemon's model answers it at once, and then
	// every job may end before any budget runs out.
	longOnGo := runnerOf(longJob) == gd.Pairing().RunnerID
	if longOnGo && longRan <= pumpBudget {
		t.Errorf("the long job ended %v after its enqueue, within one pump's budget of %v: it tests nothing", longRan, pumpBudget)
	}
	// The smoke's kills end near the time its long job does, so the pump
	// after them may stop with the site idle before its budget runs out:
	// make site-pump's longer run is where a hand-over is required.
	switch {
	case handOvers == 0 && longOnGo && os.Getenv(envJobs) != "":
		t.Error("no invocation handed over: the budget never ran out")
	case handOvers == 0:
		t.Logf("no hand-over in this run (the long job ran %v on %s); make site-pump requires one", longRan, runnerOf(longJob))
	}

	// Idle: no invocation starts after the last end but at most one
	// wake-up (the one the last pump armed), besides Lambda's retries of
	// invocations the test killed, which the kills cause and the idle site
	// does not.
	time.Sleep(idleWatch)
	var after []string
	retried := 0
	for _, inv := range em.Invocations() {
		switch {
		case !inv.At.After(lastEnd):
		case inv.Attempt > 0:
			retried++
		default:
			after = append(after, inv.Trigger)
		}
	}
	if len(after) > 1 || (len(after) == 1 && after[0] != sitepump.TriggerWakeup) {
		t.Errorf("idle for %v after the last job: invocations %v, want at most one wake-up", idleWatch, after)
	}
	if running := em.Running(); len(running) > 0 {
		t.Errorf("%d invocations still running while idle", len(running))
	}

	byTrigger, retries := map[string]int{}, 0
	for _, inv := range em.Invocations() {
		byTrigger[inv.Trigger]++
		if inv.Attempt > 0 {
			retries++
		}
	}
	summary := fmt.Sprintf("sitepump: %d jobs, %d verified (byollm %d, go %d); invocations %v (%d of them retries); %d SIGKILLs (%d with a claim unsealed at the relay); "+
		"%d endings made by a write whose invocation was stopped before it logged; %d hand-overs at a %v budget; long job ended %v after its enqueue (%s); %d seals missed a window (%v), each finished verified; "+
		"idle %v: invocations after the last end %v and %d retries; wall %v",
		jobs, verified, countRunner(st, ctx, ids, byollm.RunnerID), countRunner(st, ctx, ids, gd.Pairing().RunnerID), byTrigger, retries, kills.Load(), killsAtClaim.Load(),
		unheard, handOvers, pumpBudget, longRan.Round(time.Millisecond), siteserver.FateOf(longJob), len(late), late, idleWatch, after, retried, time.Since(started).Round(time.Millisecond))
	fmt.Println(summary)
	t.Log(summary)
}

// slowEcho is the Go daemon's backend here: the echo backend's answer,
// after perWord for each word of the prompt, so the long job runs past a
// pump's budget (a daemon runs a job that is not a live stream with Run,
// which the echo backend answers at once whatever its Drip).
type slowEcho struct{ perWord time.Duration }

func (e slowEcho) Info() daemon.BackendInfo { return daemon.EchoBackend{}.Info() }

func (e slowEcho) Run(ctx context.Context, prompt string) (daemon.Answer, error) {
	t := time.NewTimer(time.Duration(len(strings.Fields(prompt))) * e.perWord)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return daemon.Answer{}, &daemon.BackendError{Code: "canceled", Message: "the job was canceled"}
	case <-t.C:
	}
	return daemon.EchoBackend{}.Run(ctx, prompt)
}

func runnerOf(j sitestore.Job) string {
	if j.Provenance == nil {
		return ""
	}
	return j.Provenance.RunnerID
}

func countRunner(st *sitedynamo.Store, ctx context.Context, ids []string, runner string) int {
	n := 0
	for _, id := range ids {
		if j, _, _ := st.Get(ctx, id); runnerOf(j) == runner {
			n++
		}
	}
	return n
}

func postJSON(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

func readLog(t *testing.T, path string, each func(map[string]any)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil {
			each(rec)
		}
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
