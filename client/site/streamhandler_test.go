package site_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/protocol"
)

// countingLedger holds one job, "known", and counts its reads: a refusal
// by authorize must come before the ledger is asked anything.
type countingLedger struct{ lookups atomic.Int32 }

func (l *countingLedger) Track(context.Context, site.Tracked) error           { return nil }
func (l *countingLedger) Untrack(context.Context, string, string) error       { return nil }
func (l *countingLedger) Published(context.Context, string) error             { return nil }
func (l *countingLedger) Unpublished(context.Context) ([]site.Tracked, error) { return nil, nil }
func (l *countingLedger) Cancelling(context.Context, string) error            { return nil }
func (l *countingLedger) End(context.Context, site.Ending) (bool, error)      { return false, nil }
func (l *countingLedger) Expire(context.Context, int64) ([]site.Ending, error) {
	return nil, nil
}
func (l *countingLedger) Sealing(context.Context, protocol.SitePendingJob) (string, error) {
	return "", nil
}
func (l *countingLedger) Lookup(_ context.Context, jobID string) (site.Tracked, bool, error) {
	l.lookups.Add(1)
	if jobID != "known" {
		return site.Tracked{}, false, nil
	}
	return site.Tracked{Stub: protocol.JobStub{ID: "known"}}, true, nil
}

func newLedgerClient(t *testing.T, l site.Ledger) *site.Client {
	t.Helper()
	c, err := site.New(site.Config{RelayURL: "http://127.0.0.1:1", SiteID: "shop", Keys: mustKeys(t), Ledger: l})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type answer struct {
	status int
	ctype  string
	body   string
}

func get(t *testing.T, h http.Handler, target string) answer {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return answer{rec.Code, rec.Header().Get("Content-Type"), string(body)}
}

func TestAStreamHandlerNeedsAnAuthorizeFunction(t *testing.T) {
	c := newLedgerClient(t, &countingLedger{})
	h, err := c.StreamHandler(nil)
	if !errors.Is(err, site.ErrNoAuthorize) || h != nil {
		t.Fatalf("StreamHandler(nil) = %v, %v; want no handler and ErrNoAuthorize", h, err)
	}
}

// authorize refusing a job that exists and an authorized request for a
// job that does not are answered byte for byte alike, and a refusal asks
// the ledger nothing (so neither its answer nor its timing can tell).
func TestAStreamRefusalDoesNotSayWhetherTheJobExists(t *testing.T) {
	l := &countingLedger{}
	c := newLedgerClient(t, l)
	h, err := c.StreamHandler(func(r *http.Request, jobID string) bool { return r.URL.Query().Get("token") == "ok" })
	if err != nil {
		t.Fatal(err)
	}
	refused := get(t, h, "/stream?job=known&token=bad")
	if l.lookups.Load() != 0 {
		t.Fatalf("a refused request read the ledger %d times", l.lookups.Load())
	}
	unknown := get(t, h, "/stream?job=nope&token=ok")
	if refused.status != http.StatusNotFound {
		t.Fatalf("refused: %+v, want 404", refused)
	}
	if refused != unknown {
		t.Fatalf("refused %+v and unknown %+v differ", refused, unknown)
	}
	if l.lookups.Load() != 1 {
		t.Fatalf("the unknown job was looked up %d times, want 1", l.lookups.Load())
	}
}

func TestAStreamHandlerRefusesAMalformedResumeOffset(t *testing.T) {
	l := &countingLedger{}
	h, err := newLedgerClient(t, l).StreamHandler(func(*http.Request, string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"/stream?job=known&from=-1", "/stream?job=known&from=x", "/stream?job=known&from=1.5",
		"/stream?job=known&from=:5", "/stream?job=known&from=abc:-1", "/stream?job=known&from=abc:x", "/stream?job=known&from=a:b:1"} {
		if a := get(t, h, target); a.status != http.StatusBadRequest {
			t.Fatalf("%s: %+v, want 400", target, a)
		}
	}
	if l.lookups.Load() != 0 {
		t.Fatalf("malformed requests read the ledger %d times", l.lookups.Load())
	}
}
