package controlplane_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/projection"
)

// admins is an Admin over each of two Stores over one storage pair: two
// control-plane instances.
func admins(t *testing.T, a, b controlplane.Storage) (*controlplane.Admin, *controlplane.Admin) {
	t.Helper()
	one := controlplane.NewAdmin(controlplane.AdminConfig{Store: controlplane.NewStore(a), Logger: quiet})
	if b == nil {
		return one, nil
	}
	return one, controlplane.NewAdmin(controlplane.AdminConfig{Store: controlplane.NewStore(b), Logger: quiet})
}

func rosterIDs(p *projection.Projection) []string {
	var ids []string
	for _, r := range p.Fixture().Rosters {
		ids = append(ids, r.ID)
	}
	return ids
}

func TestAnEmptyStorageIsTheEmptyProjection(t *testing.T) {
	for _, tc := range storages {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := tc.pair(t)
			s := controlplane.NewStore(a)
			p, err := s.Scoped(t.Context(), projection.Query{RunnerID: "r1", Owner: "alice", SiteID: "site-a"})
			if err != nil {
				t.Fatal(err)
			}
			f := p.Fixture()
			if len(f.Sites)+len(f.Consents)+len(f.Devices)+len(f.Rosters)+len(f.Revoked) != 0 {
				t.Fatalf("empty storage gave %+v", f)
			}
		})
	}
}

func TestAChangeInOneInstanceIsSeenOnAnothersNextRead(t *testing.T) {
	for _, tc := range storages {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.pair(t)
			one, two := admins(t, a, b)
			readers := []*controlplane.Store{controlplane.NewStore(a), controlplane.NewStore(b)}
			ctx := t.Context()
			for i, writer := range []*controlplane.Admin{one, two, one} {
				id := fmt.Sprintf("r%d", i)
				if _, _, err := writer.PutRoster(ctx, id, "alice", []string{"bob"}); err != nil {
					t.Fatal(err)
				}
				for _, reader := range readers {
					p, err := reader.Scoped(ctx, projection.Query{Owner: "alice"})
					if err != nil {
						t.Fatal(err)
					}
					if got := rosterIDs(p); len(got) != i+1 || got[i] != id {
						t.Fatalf("after write %d a reader saw rosters %v", i, got)
					}
				}
			}
		})
	}
}

// Eight changes from two instances at once, every one writing the same
// partition (the owner's, where each roster is kept): each commit is
// conditioned on the version it read, so a loser re-reads and re-applies,
// and none is lost.
func TestConcurrentChangesFromTwoInstancesAllLand(t *testing.T) {
	const each = 4
	for _, tc := range storages {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.pair(t)
			one, two := admins(t, a, b)
			ctx := t.Context()
			var wg sync.WaitGroup
			for n, admin := range []*controlplane.Admin{one, two} {
				for i := range each {
					wg.Go(func() {
						if _, _, err := admin.PutRoster(ctx, fmt.Sprintf("%d-%d", n, i), "alice", []string{"bob"}); err != nil {
							t.Errorf("put roster: %v", err)
						}
					})
				}
			}
			wg.Wait()
			p, err := controlplane.NewStore(a).Scoped(ctx, projection.Query{Owner: "alice"})
			if err != nil {
				t.Fatal(err)
			}
			if got := rosterIDs(p); len(got) != 2*each {
				t.Fatalf("%d rosters landed, want %d: %v", len(got), 2*each, got)
			}
		})
	}
}

// Two admins pausing and revoking one consent at once: both land, on the
// one record, whichever order they commit in.
func TestTwoAdminsRacingOnOneRecordLoseNeitherChange(t *testing.T) {
	for _, tc := range storages {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.pair(t)
			one, two := admins(t, a, b)
			ctx := t.Context()
			site := newKeys(t).Public()
			if _, _, err := one.RegisterSite(ctx, "site-a", site); err != nil {
				t.Fatal(err)
			}
			for round := range 5 {
				owner := fmt.Sprintf("owner-%d", round)
				if _, _, err := one.AddConsent(ctx, owner, "site-a"); err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				wg.Go(func() {
					// Refused when the revocation landed first: a revoked
					// consent is not standing.
					if _, _, err := one.PauseConsent(ctx, owner, "site-a"); err != nil && !strings.Contains(err.Error(), "no standing consent") {
						t.Errorf("pause: %v", err)
					}
				})
				wg.Go(func() {
					if _, _, err := two.RevokeConsent(ctx, owner, "site-a"); err != nil {
						t.Errorf("revoke: %v", err)
					}
				})
				wg.Wait()
				p, err := controlplane.NewStore(a).Scoped(ctx, projection.Query{Owner: owner})
				if err != nil {
					t.Fatal(err)
				}
				f := p.Fixture()
				// The pause ran first, or after the revocation (refused:
				// a revoked consent is not standing). Either way the
				// revocation stands and the consent record is kept.
				if len(f.Revoked) != 1 || len(f.Consents) != 1 {
					t.Fatalf("round %d: consents %+v revoked %+v", round, f.Consents, f.Revoked)
				}
			}
		})
	}
}

func TestARefusedChangeWritesNothing(t *testing.T) {
	for _, tc := range storages {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := tc.pair(t)
			admin, _ := admins(t, a, a)
			s := controlplane.NewStore(a)
			ctx := t.Context()
			if _, _, err := admin.PutRoster(ctx, "kept", "alice", []string{"bob"}); err != nil {
				t.Fatal(err)
			}
			_, _, err := admin.AddConsent(ctx, "alice", "no-such-site")
			refusal(t, err, http.StatusNotFound)
			f, err := s.Fixture(ctx)
			if err != nil || len(f.Rosters) != 1 || len(f.Consents) != 0 {
				t.Fatalf("after a refusal: %+v, %v", f, err)
			}
		})
	}
}

// A fixture with many devices is stored one record at a time, and a scope
// finds any of them: there is no document to outgrow.
func TestALargeProjectionRoundTrips(t *testing.T) {
	for _, tc := range storages {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.pair(t)
			admin, _ := admins(t, a, b)
			reader := controlplane.NewStore(b)
			ctx := t.Context()
			keys := newKeys(t)
			f := projection.EmptyFixture()
			for i := range 3000 {
				f.Devices = append(f.Devices, projection.DeviceRecord{
					Owner: fmt.Sprintf("owner-%d", i%50), RunnerID: fmt.Sprintf("runner_%06d", i), Device: keys.Public(),
				})
			}
			if _, err := admin.Import(ctx, f); err != nil {
				t.Fatal(err)
			}
			for _, i := range []int{0, 1499, 2999} {
				id := fmt.Sprintf("runner_%06d", i)
				p, err := reader.Scoped(ctx, projection.Query{RunnerID: id})
				if err != nil {
					t.Fatal(err)
				}
				if d, ok := p.DeviceFor(id); !ok || d.Owner != fmt.Sprintf("owner-%d", i%50) {
					t.Fatalf("%s: %+v %v", id, d, ok)
				}
			}
			back, err := controlplane.NewStore(a).Fixture(ctx)
			if err != nil || len(back.Devices) != 3000 {
				t.Fatalf("exported %d devices, %v", len(back.Devices), err)
			}
			// Every device shares one identity key: the identity
			// partition keeps them in registry order.
			p, err := reader.Scoped(ctx, projection.Query{DeviceIdentity: keys.Public().Identity})
			if err != nil {
				t.Fatal(err)
			}
			if d, ok := p.DeviceByIdentity(keys.Public().Identity); !ok || d.RunnerID != "runner_000000" {
				t.Fatalf("first device with the key: %+v", d)
			}
		})
	}
}

func TestARecordTooLargeForAnItemIsRefused(t *testing.T) {
	for _, tc := range storages {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := tc.pair(t)
			admin, _ := admins(t, a, a)
			members := make([]string, controlplane.MaxRosterMembers)
			for i := range members {
				members[i] = fmt.Sprintf("member-%08d-%s", i, strings.Repeat("x", 2000))
			}
			_, _, err := admin.PutRoster(t.Context(), "big", "o", members)
			refusal(t, err, http.StatusRequestEntityTooLarge)
			f, _ := controlplane.NewStore(a).Fixture(t.Context())
			if len(f.Rosters) != 0 {
				t.Fatal("a refused roster was stored")
			}
		})
	}
}

// TestTheCacheNeverDelaysAPauseOrARevocation reads a device's scope
// through one instance, the call every relay request makes, then pauses
// the consent, revokes the route and revokes the device through another
// instance, and asks the first for the device's scope after each change:
// each is in force on the very next call, with no expiry to wait out.
func TestTheCacheNeverDelaysAPauseOrARevocation(t *testing.T) {
	for _, tc := range storages {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.pair(t)
			relaySide := controlplane.NewStore(a)
			_, admin := admins(t, a, b)
			ctx := t.Context()
			notRevoked := false
			f := projection.EmptyFixture()
			f.Sites = []projection.SiteRecord{{SiteID: "site-a", Site: newKeys(t).Public()}}
			f.Consents = []projection.ConsentRecord{{Owner: "alice", SiteID: "site-a"}}
			f.Devices = []projection.DeviceRecord{{Owner: "alice", RunnerID: "r1", Device: newKeys(t).Public(), Revoked: &notRevoked}}
			if _, err := admin.Import(ctx, f); err != nil {
				t.Fatal(err)
			}
			scoped := func() *projection.Projection {
				t.Helper()
				p, err := relaySide.Scoped(ctx, projection.Query{RunnerID: "r1"})
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			if p := scoped(); !p.MayRouteFor("alice", "site-a") || p.RevokedDevice("r1") {
				t.Fatal("the route does not stand before any change")
			}
			steps := []struct {
				name   string
				change func() error
				holds  func(p *projection.Projection) bool
			}{
				{"pause", func() error { _, _, err := admin.PauseConsent(ctx, "alice", "site-a"); return err }, func(p *projection.Projection) bool {
					return p.PausedFor("alice", "site-a") && !p.MayRouteFor("alice", "site-a")
				}},
				{"revoke the route", func() error { _, _, err := admin.RevokeConsent(ctx, "alice", "site-a"); return err }, func(p *projection.Projection) bool {
					_, standing := p.ConsentFor("alice", "site-a")
					return !standing && len(p.SitesFor("alice")) == 0
				}},
				{"revoke the device", func() error { _, _, err := admin.RevokeDevice(ctx, "r1"); return err }, func(p *projection.Projection) bool {
					return p.RevokedDevice("r1")
				}},
			}
			for _, step := range steps {
				scoped()
				if err := step.change(); err != nil {
					t.Fatal(err)
				}
				if !step.holds(scoped()) {
					t.Fatalf("%s: not in force on the very next Scoped call", step.name)
				}
			}
		})
	}
}

// An import replaces the whole projection: a record the new fixture does
// not name is gone once the import finishes, and one it names again is
// kept where it was.
func TestAnImportReplacesWhatItDoesNotName(t *testing.T) {
	for _, tc := range storages {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.pair(t)
			admin, _ := admins(t, a, b)
			ctx := t.Context()
			site := newKeys(t).Public()
			first := projection.EmptyFixture()
			first.Sites = []projection.SiteRecord{{SiteID: "site-a", Site: site}}
			first.Consents = []projection.ConsentRecord{{Owner: "alice", SiteID: "site-a"}, {Owner: "bob", SiteID: "site-a"}}
			if _, err := admin.Import(ctx, first); err != nil {
				t.Fatal(err)
			}
			if _, _, err := admin.PutRoster(ctx, "team", "alice", []string{"carol"}); err != nil {
				t.Fatal(err)
			}
			second := projection.EmptyFixture()
			second.Sites = first.Sites
			second.Consents = []projection.ConsentRecord{{Owner: "bob", SiteID: "site-a"}}
			res, err := admin.Import(ctx, second)
			if err != nil {
				t.Fatal(err)
			}
			if res.Written != 2 || res.Removed == 0 {
				t.Fatalf("import result %+v", res)
			}
			got, err := controlplane.NewStore(b).Fixture(ctx)
			if err != nil {
				t.Fatal(err)
			}
			owners := []string{}
			for _, c := range got.Consents {
				owners = append(owners, c.Owner)
			}
			if !slices.Equal(owners, []string{"bob"}) || len(got.Rosters) != 0 || len(got.Sites) != 1 {
				t.Fatalf("after the second import: %+v", got)
			}
		})
	}
}

// An admin change will not grow one owner's partition, which every request
// of the owner's devices reads whole, past its bound.
func TestAnOwnersRecordsAreBounded(t *testing.T) {
	admin, _ := admins(t, controlplane.NewMemoryStorage(), nil)
	ctx := t.Context()
	for i := range controlplane.MaxOwnerConsents + 1 {
		id := fmt.Sprintf("site-%03d", i)
		if _, _, err := admin.RegisterSite(ctx, id, newKeys(t).Public()); err != nil {
			t.Fatal(err)
		}
		_, _, err := admin.AddConsent(ctx, "alice", id)
		if i < controlplane.MaxOwnerConsents && err != nil {
			t.Fatal(err)
		}
		if i == controlplane.MaxOwnerConsents {
			refusal(t, err, http.StatusConflict)
		}
	}
	_, _, err := admin.PutRoster(ctx, "big", "alice", make([]string, controlplane.MaxRosterMembers+1))
	refusal(t, err, http.StatusBadRequest)
}
