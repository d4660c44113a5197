package controlplane_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/byorelay/byorelay/controlplane"
	"github.com/byorelay/byorelay/projection"
)

func addRoster(id string) func(f *projection.Fixture) error {
	return func(f *projection.Fixture) error {
		f.Rosters = append(f.Rosters, projection.RosterRecord{ID: id, Owner: "alice", Members: []string{"bob"}})
		return nil
	}
}

func rosterIDs(t *testing.T, p *projection.Projection) []string {
	t.Helper()
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
			p, err := s.Projection(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			f := p.Fixture()
			if len(f.Sites)+len(f.Consents)+len(f.Devices)+len(f.Rosters)+len(f.Revoked) != 0 {
				t.Fatalf("empty storage gave %+v", f)
			}
			if _, v, err := s.Fixture(t.Context()); err != nil || v != 0 {
				t.Fatalf("version %d, %v; want 0", v, err)
			}
		})
	}
}

func TestAChangeThroughOneInstanceIsSeenByAnotherOnItsVeryNextRead(t *testing.T) {
	for _, tc := range storages {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.pair(t)
			one, two := controlplane.NewStore(a), controlplane.NewStore(b)
			ctx := t.Context()
			// Both instances have a cached projection before the change.
			for _, s := range []*controlplane.Store{one, two} {
				if _, err := s.Projection(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for i, writer := range []*controlplane.Store{one, two, one} {
				id := fmt.Sprintf("r%d", i)
				if _, err := writer.Update(ctx, addRoster(id)); err != nil {
					t.Fatal(err)
				}
				for _, reader := range []*controlplane.Store{one, two} {
					p, err := reader.Projection(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if got := rosterIDs(t, p); len(got) != i+1 || got[i] != id {
						t.Fatalf("after write %d a reader saw rosters %v", i, got)
					}
				}
			}
		})
	}
}

// interleave makes the first Swap through it lose: just before it, another
// instance's whole change lands.
type interleave struct {
	controlplane.Storage
	once   sync.Once
	before func()
}

func (i *interleave) Swap(ctx context.Context, expect int64, data []byte) (int64, error) {
	i.once.Do(i.before)
	return i.Storage.Swap(ctx, expect, data)
}

func TestTwoChangesThatRaceBothLand(t *testing.T) {
	for _, tc := range storages {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.pair(t)
			ctx := t.Context()
			other := controlplane.NewStore(b)
			racing := &interleave{Storage: a, before: func() {
				if _, err := other.Update(ctx, addRoster("theirs")); err != nil {
					t.Errorf("the other change: %v", err)
				}
			}}
			applied := 0
			version, err := controlplane.NewStore(racing).Update(ctx, func(f *projection.Fixture) error {
				applied++
				return addRoster("mine")(f)
			})
			if err != nil {
				t.Fatal(err)
			}
			if applied != 2 {
				t.Fatalf("the change was applied %d times; want 2 (once, lost, once more on the fresh fixture)", applied)
			}
			if version != 2 {
				t.Fatalf("version %d, want 2", version)
			}
			p, err := other.Projection(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := rosterIDs(t, p); strings.Join(got, ",") != "theirs,mine" {
				t.Fatalf("rosters %v, want both changes", got)
			}
		})
	}
}

func TestConcurrentChangesFromTwoInstancesAllLand(t *testing.T) {
	const each = 4
	for _, tc := range storages {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.pair(t)
			ctx := t.Context()
			var wg sync.WaitGroup
			for n, s := range []*controlplane.Store{controlplane.NewStore(a), controlplane.NewStore(b)} {
				for i := range each {
					wg.Go(func() {
						if _, err := s.Update(ctx, addRoster(fmt.Sprintf("%d-%d", n, i))); err != nil {
							t.Errorf("update: %v", err)
						}
					})
				}
			}
			wg.Wait()
			p, err := controlplane.NewStore(a).Projection(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := rosterIDs(t, p); len(got) != 2*each {
				t.Fatalf("%d rosters landed, want %d: %v", len(got), 2*each, got)
			}
		})
	}
}

func TestARefusedChangeWritesNothing(t *testing.T) {
	for _, tc := range storages {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := tc.pair(t)
			s := controlplane.NewStore(a)
			ctx := t.Context()
			if _, err := s.Update(ctx, addRoster("kept")); err != nil {
				t.Fatal(err)
			}
			no := errors.New("no")
			if _, err := s.Update(ctx, func(f *projection.Fixture) error {
				f.Rosters = nil
				return no
			}); !errors.Is(err, no) {
				t.Fatalf("got %v, want the change's own error", err)
			}
			// An invalid result is refused too.
			if _, err := s.Update(ctx, func(f *projection.Fixture) error {
				f.Consents = append(f.Consents, projection.ConsentRecord{Owner: "", SiteID: "x"})
				return nil
			}); err == nil {
				t.Fatal("an invalid projection was stored")
			}
			f, v, err := s.Fixture(ctx)
			if err != nil || v != 1 || len(f.Rosters) != 1 || len(f.Consents) != 0 {
				t.Fatalf("after refusals: version %d, %+v, %v", v, f, err)
			}
		})
	}
}

// A fixture with many devices outgrows one DynamoDB item; it is chunked,
// and reads back whole across several versions (old chunks retired).
func TestALargeProjectionRoundTripsThroughDynamoDB(t *testing.T) {
	table := newTable(t)
	s := controlplane.NewStore(controlplane.NewDynamoStorage(dynamoClient(t), table))
	reader := controlplane.NewStore(controlplane.NewDynamoStorage(dynamoClient(t), table))
	ctx := t.Context()
	keys := newKeys(t)
	for round := range 3 {
		if _, err := s.Update(ctx, func(f *projection.Fixture) error {
			for i := range 1500 {
				f.Devices = append(f.Devices, projection.DeviceRecord{
					Owner: "owner", RunnerID: fmt.Sprintf("runner_%d_%06d", round, i), Device: keys.Public(),
				})
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		p, err := reader.Projection(ctx)
		if err != nil {
			t.Fatal(err)
		}
		f := p.Fixture()
		if len(f.Devices) != 1500*(round+1) {
			t.Fatalf("round %d: %d devices read back", round, len(f.Devices))
		}
		last := fmt.Sprintf("runner_%d_%06d", round, 1499)
		if _, ok := p.DeviceFor(last); !ok {
			t.Fatalf("round %d: %s missing", round, last)
		}
	}
}

func TestAProjectionTooLargeForDynamoDBIsRefused(t *testing.T) {
	s := controlplane.NewStore(controlplane.NewDynamoStorage(dynamoClient(t), newTable(t)))
	big := strings.Repeat("m", 4<<20)
	_, err := s.Update(t.Context(), func(f *projection.Fixture) error {
		f.Rosters = append(f.Rosters, projection.RosterRecord{ID: "big", Owner: "o", Members: []string{big}})
		return nil
	})
	if !errors.Is(err, controlplane.ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
}

// TestTheCacheNeverDelaysAPauseOrARevocation warms one instance's cache
// through Scoped, the call every relay request makes, then pauses the
// consent, revokes the route and revokes the device through another
// instance, and asks the first for the device's scope after each change:
// each is in force on the very next call, with no expiry to wait out.
func TestTheCacheNeverDelaysAPauseOrARevocation(t *testing.T) {
	for _, tc := range storages {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.pair(t)
			relaySide, adminSide := controlplane.NewStore(a), controlplane.NewStore(b)
			ctx := t.Context()
			site := newKeys(t).Public()
			device := newKeys(t).Public()
			notRevoked := false
			if _, err := adminSide.Update(ctx, func(f *projection.Fixture) error {
				f.Sites = append(f.Sites, projection.SiteRecord{SiteID: "site-a", Site: site})
				f.Consents = append(f.Consents, projection.ConsentRecord{Owner: "alice", SiteID: "site-a"})
				f.Devices = append(f.Devices, projection.DeviceRecord{Owner: "alice", RunnerID: "r1", Device: device, Revoked: &notRevoked})
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			q := projection.Query{RunnerID: "r1"}
			scoped := func() *projection.Projection {
				t.Helper()
				p, err := relaySide.Scoped(ctx, q)
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
				change func(f *projection.Fixture)
				holds  func(p *projection.Projection) bool
			}{
				{"pause", func(f *projection.Fixture) { f.Consents[0].Paused = true }, func(p *projection.Projection) bool {
					return p.PausedFor("alice", "site-a") && !p.MayRouteFor("alice", "site-a")
				}},
				{"revoke the route", func(f *projection.Fixture) {
					f.Revoked = append(f.Revoked, projection.RevocationRecord{Owner: "alice", SiteID: "site-a"})
				}, func(p *projection.Projection) bool {
					_, standing := p.ConsentFor("alice", "site-a")
					return !standing && len(p.SitesFor("alice")) == 0
				}},
				{"revoke the device", func(f *projection.Fixture) {
					revoked := true
					f.Devices[0].Revoked = &revoked
				}, func(p *projection.Projection) bool { return p.RevokedDevice("r1") }},
			}
			for _, step := range steps {
				scoped() // the cache is warm at the version before the change
				if _, err := adminSide.Update(ctx, func(f *projection.Fixture) error { step.change(f); return nil }); err != nil {
					t.Fatal(err)
				}
				if !step.holds(scoped()) {
					t.Fatalf("%s: not in force on the very next Scoped call", step.name)
				}
			}
		})
	}
}
