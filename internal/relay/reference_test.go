package relay_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/grant"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// The differential test: the same signed requests go to this relay and to
// the reference relay (@byollm/relay 0.1.1 under Node, through
// testdata/reference.mjs), step by step, and every answer must match in
// status, content-type and body bytes. Random values (lease ids, pairing
// codes) differ by nature; each side's are replaced by tokens in order of
// first appearance, so they must still appear in the same places.

// refConfig is what both relays are built with. The control-plane
// callbacks are the same deterministic rules on both sides.
type refConfig struct {
	LeaseMs            int64  `json:"leaseMs,omitempty"`
	VerificationURL    string `json:"verificationUrl,omitempty"`
	Debug              bool   `json:"debug,omitempty"`
	UpdateOffer        string `json:"updateOffer,omitempty"`
	DaemonFloor        string `json:"daemonFloor,omitempty"`
	ControlPlanePublic string `json:"controlPlanePublic,omitempty"`
	Grants             bool   `json:"grants,omitempty"`
	Satisfiable        bool   `json:"satisfiable,omitempty"`
}

type refOp struct {
	Op      string            `json:"op"`
	Fixture json.RawMessage   `json:"fixture,omitempty"`
	Config  *refConfig        `json:"config,omitempty"`
	Now     int64             `json:"now,omitempty"`
	Ms      int64             `json:"ms,omitempty"`
	Runner  string            `json:"runnerId,omitempty"`
	Method  string            `json:"method,omitempty"`
	Path    string            `json:"path,omitempty"`
	Query   string            `json:"query,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body,omitempty"`
}

type refAnswer struct {
	Status      int    `json:"status"`
	ContentType string `json:"contentType"`
	Body        string `json:"body"`
	Thrown      string `json:"thrown"`
}

// refSide is one relay under test and what its answers have told the
// driver so far (lease ids and pairing codes are each side's own).
type refSide struct {
	name   string
	do     func(refOp) refAnswer
	leases map[string]string
	code   string
	tokens map[string]string
}

func newRefSide(name string, do func(refOp) refAnswer) *refSide {
	return &refSide{name: name, do: do, leases: map[string]string{}, tokens: map[string]string{}}
}

// learn records what later steps refer to.
func (s *refSide) learn(body string) {
	var v struct {
		Jobs []struct {
			ID      string `json:"id"`
			JobID   string `json:"jobId"`
			LeaseID string `json:"leaseId"`
			Lease   *struct {
				ID string `json:"id"`
			} `json:"lease"`
		} `json:"jobs"`
		DeviceCode string `json:"deviceCode"`
	}
	if json.Unmarshal([]byte(body), &v) != nil {
		return
	}
	for _, j := range v.Jobs {
		if j.Lease != nil {
			s.leases[j.ID] = j.Lease.ID
		} else if j.LeaseID != "" && j.JobID != "" {
			s.leases[j.JobID] = j.LeaseID
		}
	}
	if v.DeviceCode != "" {
		s.code = v.DeviceCode
	}
}

var randomValue = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}|"deviceCode":"[A-Za-z0-9_-]{43}"|"userCode":"[0-9A-Z]{4}-[0-9A-Z]{4}"`)

// normalise replaces this side's random values with tokens numbered in
// order of first appearance.
func (s *refSide) normalise(body string) string {
	return randomValue.ReplaceAllStringFunc(body, func(v string) string {
		tok, ok := s.tokens[v]
		if !ok {
			tok = fmt.Sprintf("<random-%d>", len(s.tokens))
			s.tokens[v] = tok
		}
		return tok
	})
}

// refStep is one operation; req builds the request from what the side has
// learnt (its own lease ids and codes).
type refStep struct {
	name    string
	advance int64
	project *projection.Fixture
	// drop loses this runner's presence record, as a store restart would.
	drop string
	req  func(s *refSide) relay.Request
	// differs marks an intended difference: the two answers are not
	// compared with each other, each is held to what it is documented to
	// be (docs/decisions/).
	differs *refDifference
}

// refDifference is what each side answers to a step where this relay
// deliberately differs from the reference.
type refDifference struct {
	status int
	body   string // this relay's whole answer
	// The reference's status and error code ("" for a success), so the
	// documented difference stays true of the reference we compare with.
	refStatus int
	refCode   string
}

// nodeSide starts the reference relay under Node.
func nodeSide(t *testing.T) *refSide {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(file))
	node, modules := localtest.RequireNode(t, "@byollm/relay")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cmd := exec.CommandContext(ctx, node, filepath.Join(root, "relay", "testdata", "reference.mjs"), modules)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
		cancel()
	})
	lines := bufio.NewReader(stdout)
	return newRefSide("reference", func(op refOp) refAnswer {
		t.Helper()
		b, err := json.Marshal(op)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stdin.Write(append(b, '\n')); err != nil {
			t.Fatalf("node: %v\n%s", err, stderr.String())
		}
		line, err := lines.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) || len(line) == 0 {
			t.Fatalf("node: %v\n%s", err, stderr.String())
		}
		var a refAnswer
		if err := json.Unmarshal(line, &a); err != nil {
			t.Fatalf("node answer %q: %v", line, err)
		}
		return a
	})
}

// goSide is this relay over a store from f, built the way init says.
func goSide(t *testing.T, f storeFactory) *refSide {
	var r *relay.Relay
	var s backend
	var clk *clock.Manual
	var proj *relay.StaticProjection
	ctx := context.Background()
	parse := func(raw json.RawMessage) *projection.Projection {
		f, err := projection.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		p, err := projection.New(f)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	return newRefSide("go/"+f.name, func(op refOp) refAnswer {
		switch op.Op {
		case "init":
			clk = clock.NewManual(time.UnixMilli(op.Now))
			s = f.new(t, store.Options{Clock: clk})
			proj = relay.NewStaticProjection(parse(op.Fixture))
			c := op.Config
			cfg := relay.Config{
				Store: s, Pairing: s, Projection: proj, Clock: clk, LeaseMs: c.LeaseMs,
				VerificationURL: c.VerificationURL, Debug: c.Debug, UpdateOffer: c.UpdateOffer,
				DaemonFloor: c.DaemonFloor, ControlPlanePublic: c.ControlPlanePublic,
				Logger: slog.New(slog.DiscardHandler),
			}
			if c.Grants {
				cfg.AuthorGrant = refAuthorGrant
			}
			if c.Satisfiable {
				cfg.Satisfiable = refSatisfiable
			}
			var err error
			if r, err = relay.New(cfg); err != nil {
				t.Fatal(err)
			}
		case "advance":
			clk.Advance(time.Duration(op.Ms) * time.Millisecond)
		case "project":
			proj.Set(parse(op.Fixture))
		case "dropPresence":
			if err := s.DropPresence(ctx, op.Runner); err != nil {
				t.Fatal(err)
			}
		case "request":
			h := make(map[string][]string, len(op.Headers))
			for k, v := range op.Headers {
				h[k] = []string{v}
			}
			resp := r.Handle(ctx, relay.Request{Method: op.Method, Path: op.Path, RawQuery: op.Query, Header: h, Body: []byte(op.Body)})
			return refAnswer{Status: resp.Status, ContentType: resp.Header.Get("Content-Type"), Body: string(resp.Body)}
		}
		return refAnswer{}
	})
}

func refAuthorGrant(_ context.Context, in grant.Request) (grant.Decision, error) {
	switch {
	case strings.Contains(in.Job.ID, "decline-permanent"):
		return grant.Decision{Declined: &grant.Decline{Permanent: true, Reason: "removed"}}, nil
	case strings.Contains(in.Job.ID, "decline"):
		return grant.Decision{Declined: &grant.Decline{Reason: "elsewhere"}}, nil
	}
	purpose := in.Purpose
	if purpose == "" {
		purpose = "none"
	}
	return grant.Decision{Granted: &protocol.SignedGrant{
		GrantID: "g-" + in.Job.ID, JobID: in.Job.ID, Site: in.SiteKey, User: in.Job.Owner, Owner: in.Owner,
		Purpose: purpose, Kind: in.Job.Kind, Service: "local", IssuedAt: 1, Signature: "sig",
	}}, nil
}

func refSatisfiable(_ context.Context, q relay.SatisfiableQuery) (relay.Verdict, error) {
	switch q.Purpose {
	case "throws":
		return "", errors.New("policy store down")
	case "undeclared":
		return relay.VerdictNotDeclared, nil
	case "unmapped":
		return relay.VerdictUnmapped, nil
	case "waiting":
		return relay.VerdictWaiting, nil
	}
	return relay.VerdictOK, nil
}

// runDifferential drives this relay over each store and the reference
// through steps and compares each answer. clock is the driver's: it signs
// requests, and every side's clock moves with it.
func runDifferential(t *testing.T, cfg refConfig, fixture projection.Fixture, clk *clock.Manual, steps []refStep) {
	t.Helper()
	begin := clk.Now()
	for _, f := range factories {
		t.Run(f.name, func(t *testing.T) {
			clk.Set(begin)
			runDifferentialOn(t, goSide(t, f), cfg, fixture, clk, steps)
		})
	}
}

func runDifferentialOn(t *testing.T, ours *refSide, cfg refConfig, fixture projection.Fixture, clk *clock.Manual, steps []refStep) {
	t.Helper()
	sides := []*refSide{ours, nodeSide(t)}
	raw := fixtureJSON(t, fixture)
	for _, s := range sides {
		s.do(refOp{Op: "init", Fixture: raw, Config: &cfg, Now: clk.Now().UnixMilli()})
	}
	for i, step := range steps {
		switch {
		case step.advance != 0:
			clk.Advance(time.Duration(step.advance) * time.Millisecond)
			for _, s := range sides {
				s.do(refOp{Op: "advance", Ms: step.advance})
			}
		case step.drop != "":
			for _, s := range sides {
				s.do(refOp{Op: "dropPresence", Runner: step.drop})
			}
		case step.project != nil:
			raw := fixtureJSON(t, *step.project)
			for _, s := range sides {
				s.do(refOp{Op: "project", Fixture: raw})
			}
		default:
			var answers [2]refAnswer
			for n, s := range sides {
				req := step.req(s)
				headers := map[string]string{}
				for k, vs := range req.Header {
					headers[strings.ToLower(k)] = vs[0]
				}
				a := s.do(refOp{Op: "request", Method: req.Method, Path: req.Path, Query: req.RawQuery, Headers: headers, Body: string(req.Body)})
				s.learn(a.Body)
				a.Body = s.normalise(a.Body)
				answers[n] = a
			}
			got, want := answers[0], answers[1]
			t.Logf("step %d %q: %d %s", i, step.name, want.Status, clip(want.Body))
			if want.Thrown != "" {
				t.Errorf("step %d %q: the reference threw %q; this relay answered %d %s", i, step.name, want.Thrown, got.Status, got.Body)
				continue
			}
			if d := step.differs; d != nil {
				if got.Status != d.status || got.Body != d.body {
					t.Errorf("step %d %q (an intended difference):\n go:   %d %s\n want: %d %s", i, step.name, got.Status, clip(got.Body), d.status, d.body)
				}
				var refBody struct {
					Error string `json:"error"`
				}
				_ = json.Unmarshal([]byte(want.Body), &refBody)
				if want.Status != d.refStatus || refBody.Error != d.refCode {
					t.Errorf("step %d %q: the reference answered %d %s, documented as %d %q", i, step.name, want.Status, clip(want.Body), d.refStatus, d.refCode)
				}
				continue
			}
			if got != want {
				t.Errorf("step %d %q:\n go:        %d %s %s\n reference: %d %s %s", i, step.name, got.Status, got.ContentType, clip(got.Body), want.Status, want.ContentType, clip(want.Body))
			}
		}
	}
}

func clip(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

func fixtureJSON(t *testing.T, f projection.Fixture) json.RawMessage {
	t.Helper()
	b, err := protocol.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
