package demo

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
)

func loadEvent(t *testing.T, name string) events.APIGatewayV2HTTPRequest {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "events", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestLoadMakesKeysOnceAndReusesThem(t *testing.T) {
	dir := t.TempDir()
	a, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a.Site.KeyID() != b.Site.KeyID() || a.Daemon.KeyID() != b.Daemon.KeyID() {
		t.Fatal("a second Load made new keys: a daemon paired against the first would be refused")
	}
	if a.Site.KeyID() == a.Daemon.KeyID() {
		t.Fatal("site and daemon share a key")
	}
	for _, f := range []string{"site-keys.json", "device-keys.json"} {
		info, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is %v: a private key file readable by others", f, info.Mode().Perm())
		}
	}
}

func TestFixtureRoutesTheDemoDaemonToTheDemoSite(t *testing.T) {
	w, err := Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p, err := projection.New(w.Fixture())
	if err != nil {
		t.Fatal(err)
	}
	if !p.MayRouteFor(Owner, SiteID) {
		t.Error("the demo owner may not route for the demo site")
	}
	if d, ok := p.DeviceFor(RunnerID); !ok || d.Device != w.Daemon.Public() {
		t.Errorf("device = %+v %v", d, ok)
	}
	for _, kind := range protocol.JobKinds {
		if m, ok := p.MappingFor(Owner, SiteID, projection.ReservedPurpose, kind); !ok || m.Service != Service || m.ServiceOwner != "" {
			t.Errorf("the demo owner's %s is mapped to %+v %v, want their own %s", kind, m, ok, Service)
		}
	}
}

func TestPrepareFillsAndSignsADaemonEvent(t *testing.T) {
	w, err := Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ev := loadEvent(t, "result")
	if err := w.PrepareWithLease(&ev, now, "lease-7"); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(ev.Body, "{{") {
		t.Fatalf("placeholders left: %s", ev.Body)
	}
	var req protocol.ResultRequest
	if err := protocol.DecodeStrict([]byte(ev.Body), &req); err != nil {
		t.Fatalf("filled body is not a result request: %v", err)
	}
	if req.LeaseID != "lease-7" {
		t.Fatalf("leaseId %q, want the lease given", req.LeaseID)
	}
	// The envelope is real: the site can open what the demo daemon sealed.
	plain, err := protocol.Open(req.Envelope, w.Site, w.Daemon.Public().Identity, protocol.ExpectedEnvelope{
		JobID: JobID, SenderKeyID: w.Daemon.KeyID(), RecipientKeyID: w.Site.KeyID(), Direction: protocol.DirectionResult,
	})
	if err != nil || plain == "" {
		t.Fatalf("open: %q %v", plain, err)
	}
	sig, err := protocol.ParseSignature(ev.Headers[protocol.HeaderRunner], ev.Headers[protocol.HeaderIssuedAt], ev.Headers[protocol.HeaderSignature])
	if err != nil {
		t.Fatal(err)
	}
	if err := protocol.VerifyRequest(w.Daemon.Public().Identity, "result", []byte(ev.Body), sig, now.UnixMilli()); err != nil {
		t.Fatalf("signature: %v", err)
	}
	if ev.Headers["content-length"] != strconv.Itoa(len(ev.Body)) {
		t.Errorf("content-length = %s for %d bytes", ev.Headers["content-length"], len(ev.Body))
	}
}

func TestPrepareSignsTheDecodedBytesOfABase64SiteEvent(t *testing.T) {
	w, err := Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ev := loadEvent(t, "payload")
	if !ev.IsBase64Encoded {
		t.Fatal("the payload sample is meant to exercise a base64 body")
	}
	if err := w.Prepare(&ev, now); err != nil {
		t.Fatal(err)
	}
	body, err := base64.StdEncoding.DecodeString(ev.Body)
	if err != nil {
		t.Fatal(err)
	}
	var req protocol.PayloadRequest
	if err := protocol.DecodeStrict(body, &req); err != nil {
		t.Fatalf("filled body: %v", err)
	}
	if req.Envelope.RecipientKeyID != w.Daemon.KeyID() || req.Envelope.DeadlineAt != Deadline(now) {
		t.Errorf("envelope = %+v", req.Envelope)
	}
	sig, err := protocol.ParseSignature(ev.Headers[protocol.HeaderSite], ev.Headers[protocol.HeaderIssuedAt], ev.Headers[protocol.HeaderSignature])
	if err != nil {
		t.Fatal(err)
	}
	if err := protocol.VerifySiteRequest(w.Site.Public().Identity, "payload", body, sig, now.UnixMilli()); err != nil {
		t.Fatalf("signature over the decoded bytes: %v", err)
	}
}

func TestPrepareLeavesOtherCallersAsTheyAre(t *testing.T) {
	w, err := Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ev := loadEvent(t, "claim")
	ev.Headers[protocol.HeaderRunner] = "someone-else"
	before := ev.Headers[protocol.HeaderSignature]
	if err := w.Prepare(&ev, time.Now()); err != nil {
		t.Fatal(err)
	}
	if ev.Headers[protocol.HeaderSignature] != before {
		t.Error("a request naming another caller was re-signed with the demo key")
	}
}

func TestPrepareRefusesAnUnknownPlaceholder(t *testing.T) {
	w, err := Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ev := events.APIGatewayV2HTTPRequest{RawPath: "/byollm/claim", Body: `{"x":{{nope}}}`}
	if err := w.Prepare(&ev, time.Now()); err == nil || !strings.Contains(err.Error(), "{{nope}}") {
		t.Fatalf("err = %v", err)
	}
}

// A site-stack event names the lease the demo daemon holds, and its result
// envelope carries a sealed outcome the site opens and decodes as the
// disposition the body states.
func TestPrepareSiteLeasesAndSealsAnAcceptedOutcome(t *testing.T) {
	w, err := Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ev := loadEvent(t, "siteresult")
	if err := w.PrepareWithLease(&ev, time.Now(), "lease-42"); err != nil {
		t.Fatal(err)
	}
	var req protocol.ResultRequest
	if err := protocol.DecodeStrict([]byte(ev.Body), &req); err != nil {
		t.Fatalf("filled body is not a result request: %v", err)
	}
	if req.LeaseID != "lease-42" || req.RunnerID != RunnerID {
		t.Errorf("request = %+v", req)
	}
	plain, err := protocol.Open(req.Envelope, w.Site, w.Daemon.Public().Identity, protocol.ExpectedEnvelope{
		JobID: JobID, SenderKeyID: w.Daemon.KeyID(), RecipientKeyID: w.Site.KeyID(), Direction: protocol.DirectionResult,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := protocol.DecodeSealedOutcome(plain, req.Disposition); err != nil {
		t.Fatalf("the sealed outcome: %v", err)
	}
	// The relay's events have no lease to fill: Prepare leaves the
	// placeholder unknown rather than inventing one.
	ev = loadEvent(t, "siteresult")
	if err := w.Prepare(&ev, time.Now()); err == nil || !strings.Contains(err.Error(), PlaceholderLeaseID) {
		t.Fatalf("Prepare of a site event = %v, want the unknown {{leaseId}} named", err)
	}
}
