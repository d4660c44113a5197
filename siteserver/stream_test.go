package siteserver_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/client/daemon"
	site "github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/siteserver"
	"github.com/byorelay/byorelay/sitestore"
	sitememory "github.com/byorelay/byorelay/sitestore/memory"
	"github.com/byorelay/byorelay/store"
)

// streamAll reads a job's whole live stream through s.
func streamAll(t *testing.T, w *cloudWorld, s *siteserver.Server, id string) (string, error) {
	t.Helper()
	var got strings.Builder
	var last error
	for delta, err := range s.Stream(w.ctx, id) {
		got.WriteString(delta)
		last = err
	}
	return got.String(), last
}

// A job sealed by one site process is streamed by another on the same
// store, and by a third started after the first is gone: the stream is
// keyed to the grant the seal wrote to the store, not to the memory of the
// process that sealed it.
func TestAnyProcessOnTheStoreReadsAJobsStream(t *testing.T) {
	w := newCloudWorldWith(t, func(clock *store.ManualClock) sitestore.Store {
		return sitememory.New(sitememory.Options{Clock: clock})
	}, daemon.Streaming{Enabled: true})
	sealer := w.start(nil)
	reader := w.start(nil)

	payload, _ := json.Marshal(map[string]string{"prompt": "one two three"})
	if _, err := sealer.Enqueue(w.ctx, siteserver.EnqueueInput{ID: "s1", Kind: protocol.KindGenerate, Payload: payload,
		Owner: "alice", Streaming: true}); err != nil {
		t.Fatal(err)
	}
	var before error
	for _, err := range reader.Stream(w.ctx, "s1") {
		before = err
	}
	if !errors.Is(before, site.ErrStreamAbsent) {
		t.Fatalf("a job sealed to nobody streams: %v", before)
	}
	w.settle(sealer, w.ended("s1"))
	w.wantVerified("s1", "one two three")
	if g := w.job("s1").StreamGrant; g == nil || g.LeaseID == "" || g.Device.Identity == "" {
		t.Fatalf("the seal wrote no stream grant: %+v", g)
	}
	for name, s := range map[string]*siteserver.Server{"another process": reader, "a process started later": w.start(nil)} {
		got, err := streamAll(t, w, s, "s1")
		if err != nil || got != echoOf("one two three") {
			t.Fatalf("%s streamed %q, %v; want %q", name, got, err, echoOf("one two three"))
		}
	}
}
