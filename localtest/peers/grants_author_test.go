package peers_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/controlplane/grants"
	"github.com/byorelay/byorelay/internal/lambdafn"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/apiserver"
	"github.com/byorelay/byorelay/localtest/fakellm"
	"github.com/byorelay/byorelay/localtest/peers"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store/dynamo"
)

// teammate is a member of the device owner's roster, consented to the site.
const teammate = "bob"

// startStackWithGrants is byorelay's whole local stack (every function of
// template.yaml behind the local API server, over a fresh table) with the
// control-plane author the local `byorelay serve --grants` uses, wired
// through lambdafn.Options the way a deployment's SSM key is.
func startStackWithGrants(t *testing.T) (origin string, st *lambdafn.Stack) {
	t.Helper()
	origin, st, _ = startStackWithGrantsLogged(t)
	return origin, st
}

// startStackWithGrantsLogged is startStackWithGrants with the relay's
// decision records kept, for a test that reads why a grant was declined.
func startStackWithGrantsLogged(t *testing.T) (origin string, st *lambdafn.Stack, logs *decisionLog) {
	t.Helper()
	ctx := context.Background()
	seed, err := grants.NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	author, err := grants.New(seed, grants.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := localtest.AWSConfig(localtest.DynamoEndpoint(t))
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	table := "grants-" + hex.EncodeToString(b[:])
	if err := dynamo.CreateTable(ctx, dynamodb.NewFromConfig(cfg), table); err != nil {
		t.Fatal(err)
	}
	logs = &decisionLog{}
	st, err = lambdafn.Open(lambdafn.Env{TableName: table, VerificationURL: peers.VerificationURL, MetricsNamespace: "byorelay"},
		lambdafn.Options{AWS: &cfg, Logger: slog.New(slog.NewJSONHandler(logs, nil)), MetricsOut: io.Discard, Grants: author})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := apiserver.ForStack(st, apiserver.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts.URL, st, logs
}

// worldWithTeam is a World on that stack where the owner's roster holds
// teammate, who consented to the site too and mapped their llm.generate
// work to the owner's "primary" (the one service of peers.StartDaemon).
func worldWithTeam(t *testing.T, origin string) *peers.World {
	t.Helper()
	ctx := context.Background()
	w := peers.NewWorld(t, origin)
	if _, err := w.Admin.Consent(ctx, controlplane.ConsentAdd, controlplane.ConsentRequest{Owner: teammate, SiteID: siteID}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Admin.PutRoster(ctx, "alice-team", controlplane.RosterRequest{Owner: owner, Members: []string{teammate}}); err != nil {
		t.Fatal(err)
	}
	// With grants on, an unmapped slot is refused at enqueue
	// (slot-unsatisfiable) and declined at claim.
	mapSlot(t, w, teammate, peers.DaemonService, owner)
	return w
}

// pairWithOffer pairs the real daemon, its one service offered at scope,
// and checks it was put in relayed mode.
func pairWithOffer(t *testing.T, w *peers.World, model *peers.Model, scope string) (*peers.Daemon, peers.Pairing) {
	t.Helper()
	daemon := peers.StartDaemon(t, peers.DaemonOptions{Origin: w.Origin, Model: model, Offer: scope})
	dev := w.Approve(t, daemon.UserCode(t))
	pairing := daemon.Paired(t)
	if pairing.Owner != owner || pairing.RunnerID != dev.Device.RunnerID {
		t.Fatalf("daemon paired as %+v, approved as %+v", pairing, dev.Device)
	}
	if !pairing.ControlPlanePublic {
		t.Fatal("the daemon was not handed the control plane's key: it is in direct mode")
	}
	return daemon, pairing
}

// The point of grants: a real byollm 0.1.1 daemon, paired through
// byorelay's stack with the grant author on, runs a roster member's job on
// its owner's team-offered service. In direct mode the same daemon refuses
// that job (TestADirectModeDaemonRefusesAnotherPersonsJob). The daemon
// verified the grant against the key it pinned at pairing, so the job
// running at all is the proof that every signed field matched the stub.
func TestARealDaemonInGrantModeServesATeammatesJob(t *testing.T) {
	t.Parallel()
	origin, _ := startStackWithGrants(t)
	w := worldWithTeam(t, origin)
	model := peers.NewModel(t, "stand-in")
	daemon, pairing := pairWithOffer(t, w, model, protocol.AudienceTeam)

	prompt := "summarise the team's leases"
	site := peers.StartSite(t, peers.SiteOptions{
		Relay: w.Origin, SiteID: siteID, Keys: w.Site.Keys, Owner: teammate, Prompt: prompt,
	})
	enqueued := site.Enqueued(t)
	if enqueued.Audience != protocol.AudienceTeam {
		t.Fatalf("the site published audience %q, want team", enqueued.Audience)
	}
	done := site.Result(t)
	if done.JobID != enqueued.JobID || done.State != "ok" || done.Outcome == nil || done.Outcome.Text != fakellm.Answer(prompt) {
		t.Fatalf("the site completed %+v, want ok %q\n%s", done, fakellm.Answer(prompt), daemon.Log())
	}
	if p := done.Provenance; p == nil || p.RunnerID != pairing.RunnerID || p.RunnerOwner != owner || p.Model != model.Name {
		t.Fatalf("provenance %+v, want %s's daemon %s on %s", done.Provenance, owner, pairing.RunnerID, model.Name)
	}
	if got := model.Prompts(); !slices.Equal(got, []string{prompt}) {
		t.Fatalf("the model was asked %q, want exactly the prompt", got)
	}
	if got := daemon.Finished(t, enqueued.JobID); got != "ok" {
		t.Fatalf("daemon finished with %s", got)
	}
	for _, ev := range daemon.RunnerEvents(t) {
		if ev.Type == "refused" || ev.Type == "grant-refused" || ev.Type == "error" {
			t.Fatalf("daemon reported %+v\n%s", ev, daemon.Log())
		}
	}
}

// The author declines what the device could not honour: a teammate's job
// on a daemon that offers its service privately gets no grant, so the relay
// releases it instead of sending it, and the daemon never sees it (rather
// than refusing it as refused, which would unpick it from this device for
// good when the owner may yet widen the offer).
func TestATeammatesPrivateJobIsDeclinedBeforeTheDaemon(t *testing.T) {
	t.Parallel()
	origin, st := startStackWithGrants(t)
	w := worldWithTeam(t, origin)
	model := peers.NewModel(t, "stand-in")
	daemon, pairing := pairWithOffer(t, w, model, protocol.AudiencePrivate)

	jobID := "job-" + rand.Text()
	stub := w.Site.Stub(jobID, teammate, time.Now().Add(15*time.Minute).UnixMilli())
	stub.Audience = protocol.AudienceTeam
	var enqueued struct {
		State string `json:"state"`
	}
	call(t, w.Origin, w.Site.Request(t, "enqueue", time.Now(), protocol.EnqueueRequest{
		ProtocolVersion: pv(), SiteID: siteID, Stub: stub,
	}), &enqueued)
	if enqueued.State != "queued" {
		t.Fatalf("enqueue answered state %q", enqueued.State)
	}

	// The relay claimed it for this device (the store matches on kind
	// alone), asked the author, and put it back with a not-before for this
	// device only: declined, and transiently.
	eventually(t, "the declined job to be put back for "+pairing.RunnerID, func() bool {
		job, ok, err := st.Store.Job(context.Background(), siteID, jobID)
		if err != nil || !ok {
			t.Fatalf("job %s: %v, found %v", jobID, err, ok)
		}
		if len(job.RefusedBy) != 0 {
			t.Fatalf("the decline was permanent: refused by %v", job.RefusedBy)
		}
		return job.RetryAfter[pairing.RunnerID] > 0 && job.ClaimedBy == nil
	})
	daemon.WaitTicks(t, 3) // more claims, any of which would have carried it
	for _, ev := range daemon.RunnerEvents(t) {
		if ev.JobID == jobID {
			t.Fatalf("the daemon saw the declined job: %+v", ev)
		}
	}
	if got := model.Prompts(); len(got) != 0 {
		t.Fatalf("the model was asked %q", got)
	}
	var pending protocol.SitePendingResponse
	call(t, w.Origin, w.Site.Request(t, "pending", time.Now(), nil), &pending)
	if len(pending.Jobs) != 0 {
		t.Fatalf("pending after the decline: %+v", pending.Jobs)
	}
}

// mapSlot maps who's llm.generate work at the site (a stub naming no
// purpose) to service in serviceOwner's namespace, through the admin API.
func mapSlot(t *testing.T, w *peers.World, who, service, serviceOwner string) {
	t.Helper()
	if _, err := w.Admin.Map(context.Background(), controlplane.MapRequest{
		Owner: who, SiteID: siteID, Kind: protocol.KindGenerate, Service: service, ServiceOwner: serviceOwner,
	}); err != nil {
		t.Fatalf("map %s's llm.generate to %s's %s: %v", who, serviceOwner, service, err)
	}
}
