package projection_test

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
)

// TestScopeAnswersAsTheWholeFixture builds random fixtures over small id
// alphabets, so duplicates, rosters naming each other, paused and revoked
// consents and unregistered sites all occur, and checks that a projection of
// the scope answers every question a request about the query asks exactly
// as the projection of the whole fixture does.
func TestScopeAnswersAsTheWholeFixture(t *testing.T) {
	keys := make([]protocol.PublicIdentity, 4)
	for i := range keys {
		keys[i] = identity(t)
	}
	// One key per site id: SiteIDForKey is compared on keys no two site ids
	// share (see Scope).
	siteKey := map[string]protocol.PublicIdentity{"s0": keys[0], "s1": keys[1], "s2": keys[2], "s3": keys[3]}
	pick := func(r *rand.Rand, prefix string, n int) string { return prefix + string(rune('0'+r.IntN(n))) }
	for seed := range uint64(400) {
		r := rand.New(rand.NewPCG(seed, 21))
		f := projection.EmptyFixture()
		for range r.IntN(5) {
			id := pick(r, "s", 5) // s4 is consented to but never registered
			if id == "s4" {
				continue
			}
			f.Sites = append(f.Sites, projection.SiteRecord{SiteID: id, Site: siteKey[id]})
		}
		for range r.IntN(10) {
			f.Consents = append(f.Consents, projection.ConsentRecord{Owner: pick(r, "o", 5), SiteID: pick(r, "s", 5), Paused: r.IntN(4) == 0})
		}
		for range r.IntN(3) {
			f.Revoked = append(f.Revoked, projection.RevocationRecord{Owner: pick(r, "o", 5), SiteID: pick(r, "s", 5)})
		}
		for range r.IntN(4) {
			members := []string{}
			for range r.IntN(3) {
				members = append(members, pick(r, "o", 5))
			}
			f.Rosters = append(f.Rosters, projection.RosterRecord{ID: pick(r, "t", 3), Owner: pick(r, "o", 5), Members: members})
		}
		for range r.IntN(6) {
			revoked := r.IntN(3) == 0
			f.Devices = append(f.Devices, projection.DeviceRecord{Owner: pick(r, "o", 5), RunnerID: pick(r, "r", 4), Device: keys[r.IntN(len(keys))], Revoked: &revoked})
		}
		whole := build(t, f)
		q := projection.Query{RunnerID: pick(r, "r", 4), DeviceIdentity: keys[r.IntN(len(keys))].Identity, Owner: pick(r, "o", 5), SiteID: pick(r, "s", 5)}
		scoped := build(t, f.Scope(q))

		same := func(what string, a, b any) {
			t.Helper()
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("seed %d, %s: whole %+v, scoped %+v\nfixture %+v\nquery %+v", seed, what, a, b, f, q)
			}
		}
		d1, ok1 := whole.DeviceFor(q.RunnerID)
		d2, ok2 := scoped.DeviceFor(q.RunnerID)
		same("DeviceFor", []any{d1, ok1}, []any{d2, ok2})
		i1, ok1 := whole.DeviceByIdentity(q.DeviceIdentity)
		i2, ok2 := scoped.DeviceByIdentity(q.DeviceIdentity)
		same("DeviceByIdentity", []any{i1, ok1}, []any{i2, ok2})
		same("RevokedDevice", whole.RevokedDevice(q.RunnerID), scoped.RevokedDevice(q.RunnerID))
		s1, ok1 := whole.SiteFor(q.SiteID)
		s2, ok2 := scoped.SiteFor(q.SiteID)
		same("SiteFor", []any{s1, ok1}, []any{s2, ok2})
		for _, owner := range []string{q.Owner, d1.Owner, i1.Owner} {
			if owner == "" {
				continue
			}
			same("SitesFor "+owner, whole.SitesFor(owner), scoped.SitesFor(owner))
			same("RoutesFor "+owner, whole.RoutesFor(owner), scoped.RoutesFor(owner))
			same("OwnersRunnableBy "+owner, whole.OwnersRunnableBy(owner), scoped.OwnersRunnableBy(owner))
			for _, s := range []string{"s0", "s1", "s2", "s3", "s4"} {
				same("MayRouteFor "+owner+" "+s, whole.MayRouteFor(owner, s), scoped.MayRouteFor(owner, s))
			}
			for _, route := range whole.RoutesFor(owner) {
				site, _ := whole.SiteFor(route.SiteID)
				keyID, err := protocol.KeyID(site.Site.Identity)
				if err != nil {
					t.Fatal(err)
				}
				a1, ok1 := whole.SiteIDForKey(keyID)
				a2, ok2 := scoped.SiteIDForKey(keyID)
				same("SiteIDForKey "+route.SiteID, []any{a1, ok1}, []any{a2, ok2})
			}
		}
	}
}
