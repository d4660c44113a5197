package peers_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/lambdafn"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/apiserver"
	"github.com/byorelay/byorelay/localtest/fakekms"
	"github.com/byorelay/byorelay/localtest/fakellm"
	"github.com/byorelay/byorelay/localtest/peers"
	"github.com/byorelay/byorelay/store/dynamo"
)

// The grant key held in KMS, end to end: byorelay's whole local stack
// wired as deployed with GRANT_KMS_KEY_ID (the functions read the key's
// public half on their first request, and sign each grant with a Sign
// call), a real byollm 0.1.1 daemon paired through it, and a real
// @byollm/server site. The KMS is the stand-in (moto serves no Ed25519
// keys), reached through the SDK's kms client at AWS_ENDPOINT_URL_KMS.
// The daemon runs nothing without a grant that verifies against the key
// it pinned at pairing, so the job's answer is the proof that the grant
// KMS signed is one the daemon accepts.
//
// The owner's consent maps the job's (purpose, kind) to the daemon's one
// service, so the job is grantable under a grant law that requires a
// mapping as well as under one that picks the one service on offer.
func TestARealDaemonRunsJobsGrantedThroughKMS(t *testing.T) {
	ctx := context.Background()
	ddb := localtest.DynamoEndpoint(t)
	fake := fakekms.Start(t, fakekms.Options{})
	localtest.LambdaEnv(t, map[string]string{"dynamodb": ddb, "kms": fake.URL})
	table := localtest.UniqueName("grants-kms")
	if err := dynamo.CreateTable(ctx, dynamodb.NewFromConfig(localtest.AWSConfig(ddb)), table); err != nil {
		t.Fatal(err)
	}
	st, err := lambdafn.Open(lambdafn.Env{TableName: table, VerificationURL: peers.VerificationURL, MetricsNamespace: "byorelay",
		GrantKMSKeyID: fakekms.ARN(fake.AddKey(t, nil))},
		lambdafn.Options{Logger: slog.New(slog.DiscardHandler), MetricsOut: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := apiserver.ForStack(st, apiserver.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)

	site := relaytest.NewSite(t, peers.SiteID)
	fixture, err := json.Marshal(projection.Fixture{
		Sites: []projection.SiteRecord{site.Record()},
		Consents: []projection.ConsentRecord{{Owner: peers.Owner, SiteID: peers.SiteID, Mappings: []projection.Mapping{
			{Purpose: "default", Kind: "llm.generate", Service: "primary"}, // daemon.mjs's one service
		}}},
		Devices: []projection.DeviceRecord{}, Rosters: []projection.RosterRecord{}, Revoked: []projection.RevocationRecord{},
	})
	if err != nil {
		t.Fatal(err)
	}
	admin := controlplane.NewClient(ts.URL, nil)
	if _, err := admin.Import(ctx, fixture); err != nil {
		t.Fatalf("import: %v", err)
	}
	w := &peers.World{Origin: ts.URL, Admin: admin, Site: site}
	model := peers.NewModel(t, "stand-in")
	daemon, pairing := w.PairDaemon(t, model)
	if !pairing.ControlPlanePublic {
		t.Fatal("the daemon was not handed the control plane's key: it is in direct mode")
	}

	prompt := "sign this through KMS"
	real := peers.StartSite(t, peers.SiteOptions{Relay: w.Origin, SiteID: peers.SiteID, Keys: site.Keys, Owner: peers.Owner, Prompt: prompt})
	enqueued := real.Enqueued(t)
	done := real.Result(t)
	if done.JobID != enqueued.JobID || done.State != "ok" || done.Outcome == nil || done.Outcome.Text != fakellm.Answer(prompt) {
		t.Fatalf("the site completed %+v, want ok %q\n%s", done, fakellm.Answer(prompt), daemon.Log())
	}
	if p := done.Provenance; p == nil || p.RunnerID != pairing.RunnerID || p.Model != model.Name {
		t.Fatalf("provenance %+v, want %s on %s", done.Provenance, pairing.RunnerID, model.Name)
	}
	if got := daemon.Finished(t, enqueued.JobID); got != "ok" {
		t.Fatalf("daemon finished with %s", got)
	}
	for _, ev := range daemon.RunnerEvents(t) {
		if ev.Type == "refused" || ev.Type == "grant-refused" || ev.Type == "error" {
			t.Fatalf("daemon reported %+v\n%s", ev, daemon.Log())
		}
	}
	if fake.Signs() < 1 {
		t.Fatal("KMS signed nothing: the grant came from somewhere else")
	}
}
