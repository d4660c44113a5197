package controlplane_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/lambdafn"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/dynamo"
	"github.com/byorelay/byorelay/store/memory"
)

// slotStack is a relay asking the slot question, over each stack's stores:
// the memory projection and routing store of `byorelay-local serve
// --store memory`, and both in one DynamoDB Local table, as deployed.
type slotStack struct {
	name string
	open func(t *testing.T, clk clock.Clock) (controlplane.Storage, slotRouting)
}

type slotRouting interface {
	store.RoutingStore
	store.PairingCodes
	store.QueuedLister
}

var slotStacks = []slotStack{
	{"memory", func(t *testing.T, clk clock.Clock) (controlplane.Storage, slotRouting) {
		return controlplane.NewMemoryStorage(), memory.New(store.Options{Clock: clk})
	}},
	{"dynamodb-local", func(t *testing.T, clk clock.Clock) (controlplane.Storage, slotRouting) {
		table := localtest.UniqueName("slots")
		client := localtest.DynamoClient(t)
		if err := dynamo.CreateTable(context.Background(), client, table); err != nil {
			t.Fatal(err)
		}
		routing, err := dynamo.New(dynamo.Config{DB: client, Table: table, Options: store.Options{Clock: clk}})
		if err != nil {
			t.Fatal(err)
		}
		return controlplane.NewDynamoStorage(client, table), routing
	}},
}

// failingStorage fails every read, as a throttled or unreachable table
// would.
type failingStorage struct{ controlplane.Storage }

func (failingStorage) Read(context.Context, []string) (map[string]controlplane.Partition, error) {
	return nil, errors.New("the table is unreachable")
}

// switchable is a Storage whose reads can be made to fail.
type switchable struct {
	controlplane.Storage
	fail bool
}

func (s *switchable) Read(ctx context.Context, keys []string) (map[string]controlplane.Partition, error) {
	if s.fail {
		return failingStorage{}.Read(ctx, keys)
	}
	return s.Storage.Read(ctx, keys)
}

// Every verdict of the slot question, through the relay's enqueue, on both
// stacks' stores: the answer a site gets, and that a refused stub is not
// enqueued.
func TestEachSlotVerdictIsTheEnqueuesAnswer(t *testing.T) {
	for _, stack := range slotStacks {
		t.Run(stack.name, func(t *testing.T) {
			ctx := t.Context()
			clk := clock.NewManual(time.Now())
			raw, routing := stack.open(t, clk)
			storage := &switchable{Storage: raw}
			control := controlplane.NewStore(storage)
			admin := controlplane.NewAdmin(controlplane.AdminConfig{Store: control, Pairings: routing, Clock: clk, Logger: quiet})
			shop := relaytest.NewSite(t, "shop")
			laptop := relaytest.NewDaemon(t, "r-alice", "alice")
			fixture := relaytest.NewFixture().Site(shop).Device(laptop).Consent("alice", "shop").Consent("bob", "shop").
				Roster("team", "alice", "bob").Build()
			fixture.Sites[0].Purposes = []string{"summarise", projection.ReservedPurpose}
			if _, err := admin.Import(ctx, fixture); err != nil {
				t.Fatal(err)
			}
			rl, err := relay.New(relay.Config{Store: routing, Projection: control, Clock: clk,
				Satisfiable: lambdafn.Satisfiable(controlplane.NewSlots(control, routing))})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			enqueue := func(owner, purpose string, status int, code string) {
				t.Helper()
				n++
				stub := shop.Stub("job-"+string(rune('a'+n)), owner, clk.Now().Add(time.Hour).UnixMilli())
				stub.Kind, stub.Purpose = "llm.chat", purpose
				res := rl.Handle(ctx, shop.Request(t, "enqueue", clk.Now(), protocol.EnqueueRequest{
					ProtocolVersion: protocol.ProtocolVersion, SiteID: "shop", Stub: stub}))
				var body struct {
					Error string `json:"error"`
					State string `json:"state"`
				}
				_ = json.Unmarshal(res.Body, &body)
				if res.Status != status || body.Error != code {
					t.Fatalf("enqueue for %s, purpose %q: %d %s, want %d %q", owner, purpose, res.Status, res.Body, status, code)
				}
				_, held, err := routing.Job(ctx, "shop", stub.ID)
				if err != nil {
					t.Fatal(err)
				}
				if held != (status == http.StatusOK) {
					t.Fatalf("enqueue answered %d and the job is held: %v", status, held)
				}
			}
			mapSlot := func(req controlplane.MapRequest) {
				t.Helper()
				if _, err := admin.Map(ctx, req); err != nil {
					t.Fatal(err)
				}
			}
			seen := func(caps ...protocol.Capability) {
				t.Helper()
				if _, err := routing.Seen(ctx, store.Sighting{RunnerID: laptop.RunnerID, Owner: "alice", Device: laptop.Public(), Capabilities: caps}); err != nil {
					t.Fatal(err)
				}
			}

			enqueue("bob", "translate", http.StatusConflict, protocol.CodePurposeNotDeclared)
			enqueue("bob", "", http.StatusConflict, protocol.CodeSlotUnsatisfiable)
			enqueue("carol", "", http.StatusConflict, protocol.CodeSlotUnsatisfiable) // no consent, so no mapping
			mapSlot(controlplane.MapRequest{Owner: "bob", SiteID: "shop", Kind: "llm.chat", Service: "qwen", ServiceOwner: "alice"})
			// Mapped, and alice's device has never been seen.
			enqueue("bob", "", http.StatusConflict, protocol.CodeSlotWaiting)
			// Seen, offering another service, or qwen for another kind.
			seen(protocol.Capability{Kind: "llm.chat", Service: "small"}, protocol.Capability{Kind: "llm.generate", Service: "qwen"})
			enqueue("bob", "", http.StatusConflict, protocol.CodeSlotWaiting)
			seen(protocol.Capability{Kind: "llm.chat", Service: "qwen"})
			enqueue("bob", "", http.StatusOK, "")
			// The purpose is part of the slot: summarise is not mapped.
			enqueue("bob", "summarise", http.StatusConflict, protocol.CodeSlotUnsatisfiable)
			mapSlot(controlplane.MapRequest{Owner: "bob", SiteID: "shop", Purpose: "summarise", Kind: "llm.chat", Service: "qwen", ServiceOwner: "alice"})
			enqueue("bob", "summarise", http.StatusOK, "")
			// Presence lapses: the device went away.
			clk.Advance(controlplane.PresenceLiveMs*time.Millisecond + time.Second)
			enqueue("bob", "", http.StatusConflict, protocol.CodeSlotWaiting)
			seen(protocol.Capability{Kind: "llm.chat", Service: "qwen"})
			enqueue("bob", "", http.StatusOK, "")
			// A paused consent keeps its mappings; the slot stays answerable
			// (the grant, not the enqueue, is where a pause declines).
			if _, _, err := admin.PauseConsent(ctx, "bob", "shop"); err != nil {
				t.Fatal(err)
			}
			enqueue("bob", "", http.StatusOK, "")
			// A revoked device advertises nothing.
			if _, _, err := admin.RevokeDevice(ctx, laptop.RunnerID); err != nil {
				t.Fatal(err)
			}
			enqueue("bob", "", http.StatusConflict, protocol.CodeSlotWaiting)
			// A read that fails is a 503, never a verdict. The relay's own
			// projection read fails first if the storage fails outright, so
			// only the slot question's reads fail here.
			storage.fail = true
			rl2, err := relay.New(relay.Config{Store: routing, Projection: controlplane.NewStore(raw), Clock: clk,
				Satisfiable: lambdafn.Satisfiable(controlplane.NewSlots(control, routing))})
			if err != nil {
				t.Fatal(err)
			}
			rl = rl2
			enqueue("bob", "", http.StatusServiceUnavailable, protocol.CodeServerError)
		})
	}
}

// The operator's view of a person and the upgrade's map-unique, on both
// stacks' stores: what waits on an unmapped slot and what could answer it,
// and which slots one command can map without asking anybody.
func TestMapUniqueAndThePersonView(t *testing.T) {
	for _, stack := range slotStacks {
		t.Run(stack.name, func(t *testing.T) {
			ctx := t.Context()
			clk := clock.NewManual(time.Now())
			storage, routing := stack.open(t, clk)
			control := controlplane.NewStore(storage)
			admin := controlplane.NewAdmin(controlplane.AdminConfig{Store: control, Pairings: routing, Presence: routing, Queue: routing, Clock: clk, Logger: quiet})
			shop := relaytest.NewSite(t, "shop")
			devices := map[string]*relaytest.Daemon{}
			b := relaytest.NewFixture().Site(shop).Roster("team", "alice", "bob")
			for _, o := range []string{"alice", "bob", "carol"} {
				devices[o] = relaytest.NewDaemon(t, "r-"+o, o)
				b = b.Device(devices[o]).Consent(o, "shop")
			}
			if _, err := admin.Import(ctx, b.Build()); err != nil {
				t.Fatal(err)
			}
			seen := func(owner string, caps ...protocol.Capability) {
				t.Helper()
				d := devices[owner]
				if _, err := routing.Seen(ctx, store.Sighting{RunnerID: d.RunnerID, Owner: owner, Device: d.Public(), Capabilities: caps}); err != nil {
					t.Fatal(err)
				}
			}
			seen("alice", protocol.Capability{Kind: "llm.chat", Service: "qwen", OfferScope: "team"}, protocol.Capability{Kind: "llm.generate", Service: "qwen", OfferScope: "team"})
			seen("bob", protocol.Capability{Kind: "llm.chat", Service: "small", OfferScope: "private"}, protocol.Capability{Kind: "llm.chat", Service: "big", OfferScope: "private"})
			stub := shop.Stub("job-bob", "bob", clk.Now().Add(time.Hour).UnixMilli())
			stub.Kind = "llm.chat"
			if _, err := routing.Enqueue(ctx, store.EnqueueInput{ID: stub.ID, SiteID: "shop", Stub: stub}); err != nil {
				t.Fatal(err)
			}

			view, err := admin.Person(ctx, "bob")
			if err != nil {
				t.Fatal(err)
			}
			if len(view.Teammates) != 1 || view.Teammates[0] != "alice" || len(view.Sites) != 1 || len(view.Sites[0].Waiting) != 1 {
				t.Fatalf("bob's view %+v", view)
			}
			waiting := view.Sites[0].Waiting[0]
			var could []string
			for _, c := range waiting.Candidates {
				could = append(could, c.Service+"@"+c.Owner)
			}
			slices.Sort(could)
			if waiting.JobID != "job-bob" || waiting.Purpose != projection.ReservedPurpose || !slices.Equal(could, []string{"big@bob", "qwen@alice", "small@bob"}) {
				t.Fatalf("waiting %+v, could answer %v", waiting, could)
			}

			before := func() string { f, _ := control.Fixture(ctx); b, _ := json.Marshal(f); return string(b) }()
			dry, err := admin.MapUnique(ctx, controlplane.MapUniqueRequest{DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			after := func() string { f, _ := control.Fixture(ctx); b, _ := json.Marshal(f); return string(b) }()
			if before != after {
				t.Fatal("a dry run changed the projection")
			}
			slots := func(list []controlplane.UniqueSlot) []string {
				var out []string
				for _, s := range list {
					out = append(out, s.Owner+" "+s.Kind+" "+s.Service)
				}
				slices.Sort(out)
				return out
			}
			wantMapped := []string{"alice llm.chat qwen", "alice llm.generate qwen"}
			wantLeft := []string{"bob llm.chat ", "bob llm.generate ", "carol llm.chat ", "carol llm.generate "}
			if !slices.Equal(slots(dry.Mapped), wantMapped) || !slices.Equal(slots(dry.Left), wantLeft) {
				t.Fatalf("dry run: would map %v, leave %v", slots(dry.Mapped), slots(dry.Left))
			}
			done, err := admin.MapUnique(ctx, controlplane.MapUniqueRequest{})
			if err != nil || !slices.Equal(slots(done.Mapped), wantMapped) {
				t.Fatalf("mapped %v, %v", slots(done.Mapped), err)
			}
			p, err := control.Projection(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if m, ok := p.MappingFor("alice", "shop", projection.ReservedPurpose, "llm.generate"); !ok || m.Service != "qwen" || m.ServiceOwner != "" {
				t.Fatalf("alice's mapping %+v %v", m, ok)
			}
			if again, err := admin.MapUnique(ctx, controlplane.MapUniqueRequest{}); err != nil || len(again.Mapped) != 0 {
				t.Fatalf("a second run mapped %v, %v", slots(again.Mapped), err)
			}

			// Once bob chooses, his job no longer waits on an unmapped slot.
			if _, err := admin.Map(ctx, controlplane.MapRequest{Owner: "bob", SiteID: "shop", Kind: "llm.chat", Service: "big"}); err != nil {
				t.Fatal(err)
			}
			if view, err = admin.Person(ctx, "bob"); err != nil || len(view.Sites[0].Waiting) != 0 {
				t.Fatalf("after mapping, bob's view %+v, %v", view, err)
			}
		})
	}
}
