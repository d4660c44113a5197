package siteserver_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/daemon"
	site "github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/siteserver"
	"github.com/byorelay/byorelay/internal/sitestore"
	sitememory "github.com/byorelay/byorelay/internal/sitestore/memory"
	"github.com/byorelay/byorelay/internal/stream/seal"
	"github.com/byorelay/byorelay/protocol"
)

// tamperer stands between a site process and the relay and rewrites the
// attach's answer as a relay that tampers with what it holds would: edit
// sees each event's data and returns what to send instead ("" for
// nothing). A relay that tampers cannot be produced otherwise.
type tamperer struct{ edit func(data string) string }

func (tp tamperer) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || !strings.HasSuffix(r.URL.Path, seal.StreamAttachPath) {
		return resp, err
	}
	body := resp.Body
	pr, pw := io.Pipe()
	go func() {
		defer body.Close()
		lines := bufio.NewScanner(body)
		lines.Buffer(make([]byte, 64*1024), 1<<20)
		for lines.Scan() {
			line := lines.Text()
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				data = tp.edit(data)
				if data == "" {
					continue
				}
				line = "data: " + data
			}
			if _, err := io.WriteString(pw, line+"\n"); err != nil {
				return
			}
		}
		pw.CloseWithError(lines.Err())
	}()
	resp.Body = pr
	return resp, nil
}

// heard is a server's stream faults: what its OnStreamFault was told,
// and its log.
type heard struct {
	mu     sync.Mutex
	faults []site.StreamFault
	log    bytes.Buffer
}

func (h *heard) hear(f site.StreamFault) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults = append(h.faults, f)
}

func (h *heard) seen() ([]site.StreamFault, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]site.StreamFault(nil), h.faults...), h.log.String()
}

// lockedWriter lets the log be read while the server writes it.
type lockedWriter struct{ h *heard }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	return w.h.log.Write(p)
}

// startHearing starts a cloud-lane process on w's store whose attach goes
// to relayURL through transport, and which hears its stream faults.
func startHearing(t *testing.T, w *cloudWorld, relayURL string, transport http.RoundTripper) (*siteserver.Server, *heard) {
	t.Helper()
	h := &heard{}
	lane := &siteserver.CloudLane{RelayURL: relayURL, SiteID: "shop"}
	if transport != nil {
		lane.HTTPClient = &http.Client{Transport: transport}
	}
	s, err := siteserver.New(siteserver.Config{Store: w.store, Keys: w.keys, Cloud: lane, OnStreamFault: h.hear,
		Logger: slog.New(slog.NewJSONHandler(lockedWriter{h}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return s, h
}

// streamedJob is a world with one streaming job run to its verified end,
// its frames still at the relay.
func streamedJob(t *testing.T) (*cloudWorld, string) {
	t.Helper()
	w := newCloudWorldWith(t, func(clk *clock.Manual) sitestore.Store {
		return sitememory.New(sitememory.Options{Clock: clk})
	}, daemon.Streaming{Enabled: true})
	sealer := w.start(nil)
	payload, _ := json.Marshal(map[string]string{"prompt": "one two three four"})
	if _, err := sealer.Enqueue(w.ctx, siteserver.EnqueueInput{ID: "f1", Kind: protocol.KindGenerate, Payload: payload,
		Owner: "alice", Streaming: true}); err != nil {
		t.Fatal(err)
	}
	w.settle(sealer, w.ended("f1"))
	w.wantVerified("f1", "one two three four")
	return w, w.job("f1").StreamGrant.LeaseID
}

// A frame someone altered on the way and text the relay says in the
// clear each end the stream stale and reach OnStreamFault and the log,
// told apart by kind, with the job, the lease and the reason.
func TestATamperedFrameAndARelayFaultReachTheHook(t *testing.T) {
	w, lease := streamedJob(t)
	tests := []struct {
		name   string
		edit   func(data string) string
		kind   site.FaultKind
		reason string
	}{
		{"a ciphertext bit flipped", func(data string) string {
			var e seal.Event
			if json.Unmarshal([]byte(data), &e) != nil || e.Sealed == nil || e.Sealed.N != 0 {
				return data
			}
			raw, _ := protocol.UnB64(e.Sealed.CT)
			raw[len(raw)-1] ^= 1
			e.Sealed.CT = protocol.B64(raw)
			b, _ := json.Marshal(e)
			return string(b)
		}, site.FaultTampered, "frame 0: frame does not authenticate"},
		{"text said in the clear", func(data string) string {
			if strings.Contains(data, `"type":"sealed"`) && strings.Contains(data, `"n":0`) {
				return `{"type":"chunk","from":0,"seq":5,"text":"evil "}`
			}
			return data
		}, site.FaultRelay, "clear chunk frame from the relay"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, h := startHearing(t, w, w.url, tamperer{tc.edit})
			var got strings.Builder
			var last error
			for delta, err := range s.Stream(w.ctx, "f1") {
				got.WriteString(delta)
				last = err
			}
			if !errors.Is(last, site.ErrStreamStale) || got.String() != "" {
				t.Fatalf("the stream read %q, %v; want nothing, stale", got.String(), last)
			}
			faults, log := h.seen()
			if len(faults) != 1 {
				t.Fatalf("heard %v, want one fault", faults)
			}
			f := faults[0]
			if f.Kind != tc.kind || f.JobID != "f1" || f.LeaseID != lease || !strings.Contains(f.Reason, tc.reason) {
				t.Fatalf("heard %+v, want %s %q for f1 under %s", f, tc.kind, tc.reason, lease)
			}
			if !strings.Contains(log, `"msg":"stream fault"`) || !strings.Contains(log, `"kind":"`+string(tc.kind)+`"`) ||
				strings.Contains(log, "echo: ") {
				t.Fatalf("the log: %s", log)
			}
		})
	}
}

// A relay that takes the attach and never answers it puts the reader on
// the durable plane within AttachTimeout: Stream ends stale and the fault
// is heard as the relay's; the stream page sends the result rather than
// holding the browser.
func TestAHungRelayPutsTheReaderOnTheDurablePlane(t *testing.T) {
	w, lease := streamedJob(t)
	// The stand-in: a relay that accepts the attach and says nothing, not
	// even its headers, until the reader goes.
	hung := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // so the server hears the reader go
		<-r.Context().Done()
	}))
	t.Cleanup(func() {
		hung.CloseClientConnections()
		hung.Close()
	})
	s, h := startHearing(t, w, hung.URL, nil)

	began := time.Now()
	var ended error
	for _, err := range s.Stream(w.ctx, "f1") {
		ended = err
	}
	took := time.Since(began)
	if !errors.Is(ended, site.ErrStreamStale) || took < site.AttachTimeout || took > site.AttachTimeout+3*time.Second {
		t.Fatalf("the stream ended %v after %v; want stale after about %v", ended, took, site.AttachTimeout)
	}
	faults, _ := h.seen()
	if len(faults) != 1 || faults[0].Kind != site.FaultRelay || faults[0].LeaseID != lease ||
		!strings.Contains(faults[0].Reason, "did not answer the attach within 2s") {
		t.Fatalf("heard %+v", faults)
	}

	handler, err := s.StreamHandler(func(*http.Request, string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	page := httptest.NewServer(handler)
	t.Cleanup(page.Close)
	began = time.Now()
	b := openBrowser(w.ctx, t, page.URL+"/stream?job=f1", "")
	<-b.done
	took = time.Since(began)
	shown, _, events := b.view()
	if want := echoOf("one two three four"); shown != want || last(events) != "result" || took > site.AttachTimeout+3*time.Second {
		t.Fatalf("the page showed %q (events %q) after %v; want the result %q within about %v", shown, events, took, want, site.AttachTimeout)
	}
}

// Client.Stream fails closed: when the text it assembles stops extending
// what it already yielded (here a checkpoint of the lease whose text
// disagrees with the lease's frames: one the site sealed, so it opens),
// the stream ends stale, heard as the relay's, and never complete.
func TestAStreamWhoseTextStopsExtendingEndsStale(t *testing.T) {
	w, lease := streamedJob(t)
	full := echoOf("one two three four")
	wrong := "echo: ONE"
	self := w.keys.KeyID()
	plain, _ := json.Marshal(map[string]string{"leaseId": lease, "text": wrong})
	sealed, err := protocol.Seal(string(plain), w.keys, w.keys.Public().Encryption, protocol.EnvelopeContext{JobID: "f1",
		SenderKeyID: self, RecipientKeyID: self, DeadlineAt: w.job("f1").CreatedAt + protocol.EnvelopeMaxAgeMs,
		Direction: protocol.DirectionResult})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := w.store.PutCheckpoint(w.ctx, "f1", lease, sitestore.Checkpoint{Seq: int64(len(wrong)), Envelope: sealed}); !ok || err != nil {
		t.Fatalf("checkpoint: %v %v", ok, err)
	}
	s, h := startHearing(t, w, w.url, nil)
	var got strings.Builder
	var ended error
	for delta, err := range s.Stream(w.ctx, "f1") {
		got.WriteString(delta)
		ended = err
	}
	if !errors.Is(ended, site.ErrStreamStale) || got.String() != wrong {
		t.Fatalf("read %q, %v; want the checkpoint %q then stale (the frames say %q)", got.String(), ended, wrong, full)
	}
	if faults, _ := h.seen(); len(faults) != 1 || faults[0].Kind != site.FaultRelay || !strings.Contains(faults[0].Reason, "stopped extending") {
		t.Fatalf("heard %+v", faults)
	}
}
