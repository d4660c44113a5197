package relay_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/internal/stream/seal"
	"github.com/byorelay/byorelay/protocol"
)

// parses counts one request's parses of its body and its signature header.
type parses struct{ body, signature int }

// TestOneParsePerRequest drives every endpoint of both planes and the
// stream lane, accepted and refused, and counts what each request parsed:
// the body once, and the signature header once on a signed endpoint and
// never on pair. A second parse is a second full scan of a 6 MiB result.
// TestOnlyRequestGoParses holds that the count sees every parse.
func TestOneParsePerRequest(t *testing.T) {
	w := newStreamWorld(t, factories[0])
	var n parses
	relay.CountParses(w.relay, func(what string) {
		switch what {
		case "body":
			n.body++
		case "signature":
			n.signature++
		default:
			t.Fatalf("parse of %q", what)
		}
	})
	signed, unsigned := parses{1, 1}, parses{1, 0}
	check := func(name string, req relay.Request, status int, want parses) {
		t.Helper()
		n = parses{}
		resp := w.do(req)
		if resp.Status != status {
			t.Fatalf("%s: %d %s, want %d", name, resp.Status, resp.Body, status)
		}
		if n != want {
			t.Fatalf("%s: parsed the body %d times and the signature %d times, want %d and %d",
				name, n.body, n.signature, want.body, want.signature)
		}
	}
	d, s := w.daemon, w.site
	lease := w.job.Lease.ID

	frame, err := w.sealer.Chunk("hello")
	if err != nil {
		t.Fatal(err)
	}
	check("stream append", w.appendReq(frame), 200, signed)
	check("stream attach", w.attachReq(s, "job-1", 0), 200, signed)
	env := d.SealResult(t, "job-1", "answer", s.Public(), w.deadline())
	check("result", d.Request(t, "result", w.now(), protocol.ResultRequest{ProtocolVersion: "2", RunnerID: d.RunnerID,
		JobID: "job-1", LeaseID: lease, Envelope: env, Disposition: protocol.DispositionOK}), 200, signed)
	check("results", s.Request(t, "results", w.now(), nil), 200, signed)
	check("collect", collectReq(w, protocol.CollectRequest{ProtocolVersion: "2", SiteID: s.SiteID, Collected: []string{"job-1"}}), 200, signed)
	check("heartbeat", d.Request(t, "heartbeat", w.now(), heartbeatBody(d)), 200, signed)
	check("release", d.Request(t, "release", w.now(), protocol.ReleaseRequest{ProtocolVersion: "2", RunnerID: d.RunnerID,
		Leases: []protocol.GrantRef{}, Reason: "shutdown"}), 200, signed)
	check("pending", s.Request(t, "pending", w.now(), nil), 200, signed)
	stub := s.Stub("job-2", "alice", w.deadline())
	check("enqueue", s.Request(t, "enqueue", w.now(), protocol.EnqueueRequest{ProtocolVersion: "2", SiteID: s.SiteID, Stub: stub}), 200, signed)
	check("claim", d.Request(t, "claim", w.now(), claimBody(d, 1)), 200, signed)
	check("payload", s.Request(t, "payload", w.now(), protocol.PayloadRequest{ProtocolVersion: "2", SiteID: s.SiteID, JobID: "job-2",
		Envelope: s.Seal(t, "job-2", "prompt", d.Public(), w.deadline())}), 200, signed)
	check("cancel", s.Request(t, "cancel", w.now(), protocol.CancelRequest{ProtocolVersion: "2", SiteID: s.SiteID, JobID: "job-2"}), 200, signed)
	check("fetch", d.Request(t, "fetch", w.now(), protocol.FetchRequest{ProtocolVersion: "2", RunnerID: d.RunnerID,
		JobID: "job-9", LeaseID: "lease-9"}), 404, signed)
	check("pair", get("POST", "/byollm/pair", "", relaytest.Body(t, protocol.PairFixtureRequest{ProtocolVersion: "2",
		Owner: d.Owner, Device: d.Public()})), 200, unsigned)

	// Refused at each step of the way, and still at most once.
	check("unsigned claim", get("POST", "/byollm/claim", "", []byte(`{"protocolVersion":"2"}`)), 401, signed)
	check("a claim that fails its schema", d.Request(t, "claim", w.now(), `{"protocolVersion":"2"}`), 400, signed)
	check("an enqueue that names a job too long", s.Request(t, "enqueue", w.now(), protocol.EnqueueRequest{ProtocolVersion: "2",
		SiteID: s.SiteID, Stub: s.Stub(strings.Repeat("j", 10_000), "alice", w.deadline())}), 400, signed)
	check("a body that is not JSON", get("POST", "/byollm/claim", "", []byte(`{`)), 400, unsigned)
	check("an unknown protocol path", get("POST", "/byollm/nope", "", []byte(`{"protocolVersion":"2"}`)), 404, unsigned)
	check("a path outside the protocol", get("POST", "/healthz", "", []byte(`{}`)), 404, parses{})
	check("a stream body over its bound", get("POST", seal.StreamAppendPath, "", make([]byte, 65*1024)), 400, parses{})
}

// collectReq is a collect (a POST to results) signed by the world's site.
func collectReq(w *streamWorld, body any) relay.Request {
	raw := relaytest.Body(w.t, body)
	h := http.Header{}
	protocol.SignSiteRequest(w.site.Keys, "results", w.site.SiteID, w.nowMs(), raw).SetHeaders(h, protocol.HeaderSite)
	return relay.Request{Method: http.MethodPost, Path: "/relay/site/results", Header: h, Body: raw}
}

// TestOnlyRequestGoParses: outside request.go the relay calls none of the
// protocol's parsers of a request, so the count above sees every parse a
// request costs.
func TestOnlyRequestGoParses(t *testing.T) {
	parsers := map[string]bool{
		"ParseBody": true, "DecodeStrict": true, "Handshake": true, "CheckBody": true,
		"CheckVersion": true, "SignatureFromHeaders": true, "ParseSignature": true,
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "request.go" {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, isSel := n.(*ast.SelectorExpr)
			if !isSel {
				return true
			}
			if pkg, isIdent := sel.X.(*ast.Ident); isIdent && pkg.Name == "protocol" && parsers[sel.Sel.Name] {
				t.Errorf("%s: protocol.%s outside request.go", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
}
