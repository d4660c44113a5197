package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
)

// quickSleep stands in for the daemon's timers: it waits at most 20 ms, so
// a pairing poll or an idle claim loop does not hold a test for seconds.
func quickSleep(ctx context.Context, d time.Duration) error {
	d = min(d, 20*time.Millisecond)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// startDirect serves the example in the direct lane on loopback, over the
// memory store, and pairs a Go daemon with it.
func startDirect(t *testing.T, owner string) string {
	t.Helper()
	return startDirectBehind(t, owner, func(h http.Handler) http.Handler { return h })
}

// startDirectBehind is startDirect with the example's handler wrapped, as
// a proxy in front of it would.
func startDirectBehind(t *testing.T, owner string, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	keys, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	origin := serveDirect(t, options{lane: "direct", owner: owner}, keys, wrap)
	pairDaemon(t, origin, owner)
	return origin
}

// serveDirect serves the example in the direct lane on loopback with the
// store o names, as `go run ./examples/chat` would.
func serveDirect(t *testing.T, o options, keys *protocol.Keys, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	store, err := openStore(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	var handler http.Handler
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	t.Cleanup(ts.Close)
	handler, _, err = build(o, keys, ts.URL, store)
	if err != nil {
		t.Fatal(err)
	}
	handler = wrap(handler)
	return ts.URL
}

// pairDaemon pairs a Go daemon with the example at origin through the
// page's own pairing form, as a person would; the daemon runs until the
// test ends and echoes every prompt.
func pairDaemon(t *testing.T, origin, owner string) {
	t.Helper()
	deviceKeys, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(daemon.Config{RelayURL: origin, Keys: deviceKeys, Backend: daemon.EchoBackend{}, Sleep: quickSleep})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	t.Cleanup(func() { cancel(); <-ran })
	paired, err := d.Pair(ctx, "test machine", func(c daemon.PairCode) {
		go func() {
			var out struct {
				RunnerID string `json:"runnerId"`
			}
			if status := postJSON(t, origin+"/pair", map[string]string{"code": c.UserCode}, &out); status != http.StatusOK || out.RunnerID == "" {
				t.Errorf("approving %s on the page: %d %+v", c.UserCode, status, out)
			}
		}()
	})
	if err != nil {
		close(ran)
		t.Fatal(err)
	}
	if paired.Owner != owner {
		close(ran)
		t.Fatalf("the daemon paired as %s's, want %s's", paired.Owner, owner)
	}
	go func() { defer close(ran); _ = d.Run(ctx) }()
}

// With -table the site's jobs outlive the process: a prompt asked of one
// run of the example, before any daemon is paired, is answered through
// the next run on the same DynamoDB table (DynamoDB Local here), and its
// event stream there carries the answer.
func TestAPromptAskedBeforeARestartIsAnsweredAfterIt(t *testing.T) {
	// The AWS chain the example reads; DynamoDB Local takes any.
	localtest.LambdaEnv(t, nil)
	keys, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	o := options{lane: "direct", owner: "alice", table: "example-" + strings.ToLower(rand.Text()),
		ddbEndpoint: localtest.DynamoEndpoint(t)}
	nobody := func(h http.Handler) http.Handler { return h }

	first := serveDirect(t, o, keys, nobody)
	prompt := "still there after a restart?"
	var asked struct {
		ID string `json:"id"`
	}
	if status := postJSON(t, first+"/ask", map[string]string{"prompt": prompt}, &asked); status != http.StatusOK || asked.ID == "" {
		t.Fatalf("ask answered %d %+v", status, asked)
	}

	second := serveDirect(t, o, keys, nobody)
	pairDaemon(t, second, "alice")
	states := readEvents(t, second+"/jobs/"+asked.ID+"/events")
	if last := states[len(states)-1]; last.State != "ok" || last.Answer != "echo: "+prompt {
		t.Fatalf("after the restart the stream ended with %+v, want ok %q", last, "echo: "+prompt)
	}
}

// In the direct lane, a prompt posted to the page's backend is enqueued,
// claimed by the person's paired Go daemon, and its answer arrives on the
// job's event stream: each state once, ending with the answer.
func TestTheDirectLaneAnswersThroughTheEventStream(t *testing.T) {
	origin := startDirect(t, "alice")
	prompt := "say hello to the example"

	var asked struct {
		ID string `json:"id"`
	}
	if status := postJSON(t, origin+"/ask", map[string]string{"prompt": prompt}, &asked); status != http.StatusOK || asked.ID == "" {
		t.Fatalf("ask answered %d %+v", status, asked)
	}
	states := readEvents(t, origin+"/jobs/"+asked.ID+"/events")
	last := states[len(states)-1]
	t.Logf("states: %+v", states)
	if !last.Done || last.State != "ok" || last.Answer != "echo: "+prompt || last.Error != "" {
		t.Fatalf("the stream ended with %+v, want ok %q; all: %+v", last, "echo: "+prompt, states)
	}
	for i := 1; i < len(states); i++ {
		if states[i] == states[i-1] {
			t.Fatalf("the stream repeated a state: %+v", states)
		}
	}
	// The fallback poll reads the same.
	var polled JobView
	if status := getJSON(t, origin+"/jobs/"+asked.ID, &polled); status != http.StatusOK || polled != last {
		t.Fatalf("the poll read %d %+v, the stream ended with %+v", status, polled, last)
	}
}

// What the page's backend refuses, and that refusing changes nothing.
func TestTheExampleRefusesBadInput(t *testing.T) {
	origin := startDirect(t, "alice")
	for name, body := range map[string]string{
		"an empty prompt":        `{"prompt":"  "}`,
		"an unknown field":       `{"prompt":"hi","owner":"mallory"}`,
		"not JSON":               `prompt=hi`,
		"a prompt over 8 KiB":    `{"prompt":"` + strings.Repeat("a", MaxPromptBytes+1) + `"}`,
		"a pairing without code": `{}`,
	} {
		path := "/ask"
		if strings.Contains(name, "pairing") {
			path = "/pair"
		}
		resp, err := http.Post(origin+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", name, resp.StatusCode)
		}
	}
	resp, err := http.Post(origin+"/ask", "text/plain", strings.NewReader(`{"prompt":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a text/plain ask (what a cross-site form sends): %d, want 400", resp.StatusCode)
	}
	for _, path := range []string{"/jobs/nope", "/jobs/nope/events"} {
		var out map[string]string
		if status := getJSON(t, origin+path, &out); status != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", path, status)
		}
	}
}

// readEvents reads a job's event stream to its end and returns its state
// events in order.
func readEvents(t *testing.T, url string) []JobView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("events: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	var out []JobView
	event := ""
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if event != "state" {
				t.Fatalf("data for event %q: %s", event, line)
			}
			var v JobView
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &v); err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the stream: %v (so far %+v)", err, out)
	}
	if len(out) == 0 || !out[len(out)-1].Done {
		t.Fatalf("the stream ended before the job did: %+v", out)
	}
	return out
}

func postJSON(t *testing.T, url string, body, out any) int {
	t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		t.Error(err)
		return 0
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Error(err)
		return 0
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Errorf("POST %s: %v", url, err)
	}
	return resp.StatusCode
}

func getJSON(t *testing.T, url string, out any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode
}
