package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/internal/siteserver"
	"github.com/byorelay/byorelay/internal/sitestore"
	sitedynamo "github.com/byorelay/byorelay/internal/sitestore/dynamo"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// The site stack's demo world (site-template.yaml, `make invoke
// FN=site…`): a direct-lane site holding the demo site's keys, the demo
// daemon paired to it as RunnerID for Owner, and JobID queued for Owner.
// The names are the relay demo's, so one set of sample-event conventions
// and one Prepare serve both stacks.

// SiteVerificationURL is the verification URL the demo site hands a
// pairing daemon: `make site`'s page on its default port.
const SiteVerificationURL = "http://127.0.0.1:8788/pair"

// CreateSiteTable creates table from site-template.yaml unless it exists.
func CreateSiteTable(ctx context.Context, db ddb.TableCreator, table string) error {
	err := sitedynamo.CreateTable(ctx, db, table)
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return err
	}
	return nil
}

// SeedSite makes a site holding the demo site's keys ready for the site
// demo, through its own server and store (sitefn.Open's, so this package
// links no function wiring): the demo daemon paired (through a pairing
// approved for Owner, the way an app approves one) unless it already is,
// and JobID enqueued through the app's Enqueue (idempotent by id: a job
// already there is left as it is).
func (w *World) SeedSite(ctx context.Context, srv *siteserver.Server, st sitestore.RunnerStore) error {
	if srv.SiteKeyID() != w.Site.KeyID() {
		return fmt.Errorf("demo: the site holds key %s, not the demo site's %s", srv.SiteKeyID(), w.Site.KeyID())
	}
	if err := w.pairSite(ctx, st); err != nil {
		return fmt.Errorf("demo: pair the demo daemon with the site: %w", err)
	}
	_, err := srv.Enqueue(ctx, siteserver.EnqueueInput{
		ID: JobID, Kind: protocol.KindGenerate, Owner: Owner,
		Payload: json.RawMessage(`{"prompt":"Say hello to the site."}`),
	})
	if err != nil {
		return fmt.Errorf("demo: enqueue %s: %w", JobID, err)
	}
	return nil
}

func (w *World) pairSite(ctx context.Context, st sitestore.RunnerStore) error {
	if _, found, err := st.Runner(ctx, RunnerID); err != nil || found {
		return err
	}
	now := time.Now().UnixMilli()
	code := sitestore.NewUserCode()
	err := st.CreatePairing(ctx, sitestore.Pairing{
		DeviceCodeHash: sitestore.HashDeviceCode(protocol.NewDeviceCode()),
		UserCode:       code,
		State:          sitestore.PairingPending,
		Label:          "demo daemon",
		Platform:       "linux",
		DaemonVersion:  "0.1.1",
		Capabilities:   []protocol.Capability{DemoCapability},
		Device:         w.Daemon.Public(),
		ExpiresAt:      now + 10*60_000,
		CreatedAt:      now,
	})
	if err != nil {
		return err
	}
	_, err = st.ApprovePairing(ctx, sitestore.ApproveInput{UserCode: code, Owner: Owner, RunnerID: RunnerID})
	return err
}

// DemoCapability is what the demo daemon offers: the capability the
// sample claim events name.
var DemoCapability = protocol.Capability{
	Kind: protocol.KindGenerate, Service: "local-ollama", BackendID: "ollama",
	BackendClass: "http", Model: "llama3.2:3b", OfferScope: protocol.AudiencePrivate,
}

// NoLease is what {{leaseId}} becomes when the demo daemon holds no lease
// on JobID: an id nobody holds, so the relay or the site answers as it
// answers a daemon naming a lease it lost.
const NoLease = "no-lease-held-by-runner-demo"

// SiteLease is the lease the demo daemon holds on JobID in the site store,
// or NoLease: what a site-stack sample event's {{leaseId}} becomes.
func SiteLease(ctx context.Context, st sitestore.JobStore) (string, error) {
	j, found, err := st.Get(ctx, JobID)
	if err != nil {
		return "", err
	}
	if !found || j.Lease == nil || j.Lease.RunnerID != RunnerID {
		return NoLease, nil
	}
	return j.Lease.ID, nil
}

// SiteKeysJSON is the demo site's keys as StoredKeys JSON, what a site
// function reads from its SSM parameter (sitefn.ParseKeys).
func (w *World) SiteKeysJSON() ([]byte, error) {
	return json.Marshal(w.Site.Stored(time.Now().UnixMilli()))
}

// RelayLease is the lease the demo daemon holds on the demo site's JobID
// in the relay's routing store, or NoLease: what a relay sample event's
// {{leaseId}} becomes.
func RelayLease(ctx context.Context, st store.RoutingStore) (string, error) {
	j, found, err := st.Job(ctx, SiteID, JobID)
	if err != nil {
		return "", err
	}
	if !found || j.ClaimedBy == nil || j.ClaimedBy.RunnerID != RunnerID {
		return NoLease, nil
	}
	return j.ClaimedBy.LeaseID, nil
}
