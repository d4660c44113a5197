package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/peers"
	"github.com/byorelay/byorelay/protocol"
)

func TestMain(m *testing.M) { localtest.Main(m) }

// In the cloud lane, the same page's prompt goes through byorelay (the
// local stack over DynamoDB Local, with the site registered and the owner's
// consent recorded by an operator): published as a stub, claimed by a Go
// daemon paired with the relay, sealed to it, and its verified answer
// arrives on the job's event stream. With -stream the job is published as
// a live stream, which the daemon (opted in) streams to /live.
func TestTheCloudLaneAnswersAPromptThroughByorelay(t *testing.T) {
	w := peers.NewWorld(t, peers.StartByorelay(t).Origin)
	o := options{lane: "cloud", owner: peers.Owner, relay: w.Origin, siteID: peers.SiteID, stream: true}
	store, err := openStore(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	handler, pump, err := build(o, w.Site.Keys, "", store)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(handler)
	t.Cleanup(ts.Close)
	ctx, cancel := context.WithCancel(context.Background())
	pumped := make(chan error, 1)
	t.Cleanup(func() {
		cancel()
		if err := <-pumped; err != nil && ctx.Err() == nil {
			t.Errorf("the site's pump stopped: %v", err)
		}
	})
	go func() { pumped <- pump(ctx) }()

	deviceKeys, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(daemon.Config{RelayURL: w.Origin, Keys: deviceKeys, Backend: daemon.EchoBackend{Drip: 20 * time.Millisecond}, Sleep: quickSleep,
		Streams: daemon.Streaming{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{})
	t.Cleanup(func() { cancel(); <-ran })
	if _, err := d.Pair(ctx, "test machine", func(c daemon.PairCode) {
		go func() {
			if _, err := w.Admin.Approve(ctx, controlplane.ApproveRequest{UserCode: c.UserCode, Owner: peers.Owner}); err != nil {
				t.Errorf("approve %s at the relay: %v", c.UserCode, err)
			}
		}()
	}); err != nil {
		close(ran)
		t.Fatal(err)
	}
	go func() { defer close(ran); _ = d.Run(ctx) }()

	prompt := "say hello through the relay"
	var asked struct {
		ID string `json:"id"`
	}
	if status := postJSON(t, ts.URL+"/ask", map[string]string{"prompt": prompt}, &asked); status != http.StatusOK || asked.ID == "" {
		t.Fatalf("ask answered %d %+v", status, asked)
	}
	states := readEvents(t, ts.URL+"/jobs/"+asked.ID+"/events")
	last := states[len(states)-1]
	t.Logf("states: %+v", states)
	if !last.Done || last.State != "ok" || last.Answer != "echo: "+prompt || last.Error != "" {
		t.Fatalf("the stream ended with %+v, want ok %q", last, "echo: "+prompt)
	}
	// The answer streamed live too: the page's /live (authorised for the
	// owner) reads the relay's frames, whole and in order, after the
	// result; a job that is not there is refused.
	if got := readLive(t, ts.URL+"/live?job="+asked.ID); got != "echo: "+prompt {
		t.Fatalf("/live streamed %q, want %q", got, "echo: "+prompt)
	}
	if resp, err := http.Get(ts.URL + "/live?job=nope"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/live for no such job: %v %v, want 404", resp, err)
	} else {
		resp.Body.Close()
	}
	// The relay's own pairing, not the page's: the cloud page has no form.
	resp, err := http.Post(ts.URL+"/pair", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST /pair in the cloud lane: %d, want no such endpoint", resp.StatusCode)
	}
}

// readLive reads a /live answer to its end and returns the text it sent.
func readLive(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, line := range strings.Split(string(body), "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var d struct {
				Text string `json:"text"`
			}
			if json.Unmarshal([]byte(data), &d) == nil {
				text.WriteString(d.Text)
			}
		}
	}
	return text.String()
}
