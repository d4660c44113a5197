package controlplane_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/memory"
)

// world is an Admin over one of the storages, with a memory pairing store,
// a site "shop", and alice and bob consented to it; bob is on alice's team.
type world struct {
	*rig
	storage controlplane.Storage
}

func newWorld(t *testing.T, storage controlplane.Storage) *world {
	t.Helper()
	clk := clock.NewManual(epoch)
	pairings := memory.New(store.Options{Clock: clk})
	s := controlplane.NewStore(storage)
	w := &world{rig: &rig{store: s, pairings: pairings, clock: clk,
		admin: controlplane.NewAdmin(controlplane.AdminConfig{Store: s, Pairings: pairings, Clock: clk, Logger: quiet})}, storage: storage}
	ctx := t.Context()
	w.site(t, "shop")
	for _, o := range []string{"alice", "bob"} {
		if _, _, err := w.admin.AddConsent(ctx, o, "shop"); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := w.admin.PutRoster(ctx, "team", "alice", []string{"bob"}); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *world) mappings(t *testing.T, owner string) []projection.Mapping {
	t.Helper()
	p, err := w.store.Scoped(t.Context(), projection.Query{Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	c, ok := p.ConsentFor(owner, "shop")
	if !ok {
		return nil
	}
	return c.Mappings
}

func TestMappingsAreOnePerSlotAndLiveWithTheConsent(t *testing.T) {
	for _, tc := range storages {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := tc.pair(t)
			w := newWorld(t, a)
			ctx := t.Context()
			// A stub with no purpose is judged under the reserved one, so a
			// mapping made without one is stored under it.
			if _, err := w.admin.Map(ctx, controlplane.MapRequest{Owner: "bob", SiteID: "shop", Kind: "llm.chat", Service: "qwen"}); err != nil {
				t.Fatal(err)
			}
			res, err := w.admin.Map(ctx, controlplane.MapRequest{Owner: "bob", SiteID: "shop", Kind: "llm.chat", Service: "big", ServiceOwner: "alice"})
			if err != nil {
				t.Fatal(err)
			}
			want := []projection.Mapping{{Purpose: projection.ReservedPurpose, Kind: "llm.chat", Service: "big", ServiceOwner: "alice"}}
			if !slices.Equal(res.Mappings, want) || !slices.Equal(w.mappings(t, "bob"), want) {
				t.Fatalf("after a remap: answered %+v, stored %+v, want the one mapping %+v", res.Mappings, w.mappings(t, "bob"), want)
			}
			if _, err := w.admin.Map(ctx, controlplane.MapRequest{Owner: "bob", SiteID: "shop", Purpose: "summarise", Kind: "llm.chat", Service: "qwen", ServiceOwner: "bob"}); err != nil {
				t.Fatal(err)
			}
			// Naming oneself as the service's owner is the person's own
			// namespace: stored as "".
			want = append(want, projection.Mapping{Purpose: "summarise", Kind: "llm.chat", Service: "qwen"})
			if got := w.mappings(t, "bob"); !slices.Equal(got, want) {
				t.Fatalf("mappings %+v, want %+v", got, want)
			}

			// A pause keeps them.
			if _, _, err := w.admin.PauseConsent(ctx, "bob", "shop"); err != nil {
				t.Fatal(err)
			}
			if got := w.mappings(t, "bob"); !slices.Equal(got, want) {
				t.Fatalf("a pause changed the mappings to %+v", got)
			}
			if _, _, err := w.admin.ResumeConsent(ctx, "bob", "shop"); err != nil {
				t.Fatal(err)
			}
			// Unmapping removes one slot.
			if _, err := w.admin.Unmap(ctx, controlplane.UnmapRequest{Owner: "bob", SiteID: "shop", Purpose: "summarise", Kind: "llm.chat"}); err != nil {
				t.Fatal(err)
			}
			_, err = w.admin.Unmap(ctx, controlplane.UnmapRequest{Owner: "bob", SiteID: "shop", Purpose: "summarise", Kind: "llm.chat"})
			refusal(t, err, http.StatusNotFound)
			// Withdrawing the consent deletes them, and consenting again
			// starts unmapped.
			if _, _, err := w.admin.RevokeConsent(ctx, "bob", "shop"); err != nil {
				t.Fatal(err)
			}
			_, err = w.admin.Map(ctx, controlplane.MapRequest{Owner: "bob", SiteID: "shop", Kind: "llm.chat", Service: "qwen"})
			refusal(t, err, http.StatusNotFound)
			if _, _, err := w.admin.AddConsent(ctx, "bob", "shop"); err != nil {
				t.Fatal(err)
			}
			if got := w.mappings(t, "bob"); len(got) != 0 {
				t.Fatalf("a consent given again came back with the withdrawn one's mappings %+v", got)
			}
		})
	}
}

func TestAMappingThatCouldNeverRouteIsRefused(t *testing.T) {
	for _, tc := range storages {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := tc.pair(t)
			w := newWorld(t, a)
			ctx := t.Context()
			before := w.state(t)
			for _, c := range []struct {
				name   string
				req    controlplane.MapRequest
				status int
			}{
				{"no consent", controlplane.MapRequest{Owner: "carol", SiteID: "shop", Kind: "llm.chat", Service: "qwen"}, http.StatusNotFound},
				{"no such site", controlplane.MapRequest{Owner: "alice", SiteID: "elsewhere", Kind: "llm.chat", Service: "qwen"}, http.StatusNotFound},
				// alice is not on bob's team: bob's devices may never run
				// alice's work.
				{"not a teammate's", controlplane.MapRequest{Owner: "alice", SiteID: "shop", Kind: "llm.chat", Service: "qwen", ServiceOwner: "bob"}, http.StatusConflict},
				{"no kind", controlplane.MapRequest{Owner: "alice", SiteID: "shop", Service: "qwen"}, http.StatusBadRequest},
				{"no service", controlplane.MapRequest{Owner: "alice", SiteID: "shop", Kind: "llm.chat"}, http.StatusBadRequest},
				{"a kind past its bound", controlplane.MapRequest{Owner: "alice", SiteID: "shop", Kind: string(make([]byte, projection.MaxNameBytes+1)), Service: "qwen"}, http.StatusBadRequest},
			} {
				_, err := w.admin.Map(ctx, c.req)
				if err == nil {
					t.Fatalf("%s: mapped", c.name)
				}
				refusal(t, err, c.status)
			}
			if after := w.state(t); after != before {
				t.Fatalf("a refused mapping changed the projection:\n%s\n%s", before, after)
			}
		})
	}
}

func TestASitesPurposesAreSetAndCleared(t *testing.T) {
	for _, tc := range storages {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := tc.pair(t)
			w := newWorld(t, a)
			ctx := t.Context()
			if _, _, err := w.admin.SetSitePurposes(ctx, "shop", []string{"summarise", "default"}); err != nil {
				t.Fatal(err)
			}
			p := w.projection(t)
			if !p.Declares("shop", "summarise") || !p.Declares("shop", projection.ReservedPurpose) || p.Declares("shop", "translate") {
				t.Fatal("the declared purposes are not what was set")
			}
			_, _, err := w.admin.SetSitePurposes(ctx, "shop", []string{"a", "a"})
			refusal(t, err, http.StatusBadRequest)
			_, _, err = w.admin.SetSitePurposes(ctx, "nowhere", []string{"a"})
			refusal(t, err, http.StatusNotFound)
			if _, _, err := w.admin.SetSitePurposes(ctx, "shop", nil); err != nil {
				t.Fatal(err)
			}
			if !w.projection(t).Declares("shop", "translate") {
				t.Fatal("a site that declares none should declare every purpose")
			}
		})
	}
}

func TestMappingsRoundTripThroughExportAndImport(t *testing.T) {
	for _, tc := range storages {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := tc.pair(t)
			w := newWorld(t, a)
			ctx := t.Context()
			if _, err := w.admin.Map(ctx, controlplane.MapRequest{Owner: "bob", SiteID: "shop", Purpose: "summarise", Kind: "llm.chat", Service: "big", ServiceOwner: "alice"}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := w.admin.SetSitePurposes(ctx, "shop", []string{"summarise"}); err != nil {
				t.Fatal(err)
			}
			exported, err := w.admin.Export(ctx)
			if err != nil {
				t.Fatal(err)
			}
			doc, err := json.Marshal(exported)
			if err != nil {
				t.Fatal(err)
			}
			parsed, err := projection.Parse(doc)
			if err != nil {
				t.Fatalf("our own export does not parse: %v", err)
			}
			b, _ := tc.pair(t)
			other := newWorld(t, b)
			if _, err := other.admin.Import(ctx, parsed); err != nil {
				t.Fatal(err)
			}
			again, err := other.admin.Export(ctx)
			if err != nil {
				t.Fatal(err)
			}
			redoc, _ := json.Marshal(again)
			if string(redoc) != string(doc) {
				t.Fatalf("an import of the export exports differently:\n%s\n%s", doc, redoc)
			}
			m, ok := other.projection(t).MappingFor("bob", "shop", "summarise", "llm.chat")
			if !ok || m.Service != "big" || m.ServiceOwner != "alice" {
				t.Fatalf("imported mapping %+v %v", m, ok)
			}
		})
	}
}

// countingStorage counts the reads a Storage serves and the partitions
// they name.
type countingStorage struct {
	controlplane.Storage
	mu    sync.Mutex
	reads int
	keys  []string
}

func (c *countingStorage) Read(ctx context.Context, keys []string) (map[string]controlplane.Partition, error) {
	c.mu.Lock()
	c.reads++
	c.keys = append(c.keys, keys...)
	c.mu.Unlock()
	return c.Storage.Read(ctx, keys)
}

// A claim reads a device's scope: its records, its owner's, the roster
// members', the sites they name. The mappings ride inside the consents of
// the owners' partitions, so mapping slots adds neither a round nor a
// partition to that read.
func TestMappingsCostADevicesScopeNoExtraRead(t *testing.T) {
	for _, tc := range storages {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := tc.pair(t)
			w := newWorld(t, a)
			ctx := t.Context()
			runner := w.approve(t, "alice")
			measure := func() (int, []string) {
				counting := &countingStorage{Storage: a}
				p, err := controlplane.NewStore(counting).Scoped(ctx, projection.Query{RunnerID: runner})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(p.RoutesFor("alice"), store.Route{SiteID: "shop", Owner: "bob"}) {
					t.Fatal("alice's device may not run bob's work at shop")
				}
				slices.Sort(counting.keys)
				return counting.reads, counting.keys
			}
			reads, keys := measure()
			for _, o := range []string{"alice", "bob"} {
				if _, err := w.admin.Map(ctx, controlplane.MapRequest{Owner: o, SiteID: "shop", Kind: "llm.chat", Service: "qwen", ServiceOwner: "alice"}); err != nil {
					t.Fatal(err)
				}
			}
			mappedReads, mappedKeys := measure()
			if mappedReads != reads || !slices.Equal(mappedKeys, keys) {
				t.Fatalf("with mappings the scope read %d rounds of %q, without %d of %q", mappedReads, mappedKeys, reads, keys)
			}
			p, err := w.store.Scoped(ctx, projection.Query{RunnerID: runner})
			if err != nil {
				t.Fatal(err)
			}
			if m, ok := p.MappingFor("bob", "shop", projection.ReservedPurpose, "llm.chat"); !ok || m.Service != "qwen" {
				t.Fatalf("the device's scope does not hold bob's mapping: %+v %v", m, ok)
			}
		})
	}
}

// approve pairs a fresh device for owner and returns its runner id.
func (r *rig) approve(t *testing.T, owner string) string {
	t.Helper()
	code := r.pending(t, newKeys(t), "laptop")
	a, _, err := r.admin.ApprovePairing(t.Context(), code, owner, "")
	if err != nil {
		t.Fatal(err)
	}
	return a.Device.RunnerID
}
