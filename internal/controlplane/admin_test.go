package controlplane_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

func (r *rig) projection(t *testing.T) *projection.Projection {
	t.Helper()
	p, err := r.store.Projection(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// state is everything stored, to compare before and after a refusal.
func (r *rig) state(t *testing.T) string {
	t.Helper()
	f, err := r.store.Fixture(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (r *rig) site(t *testing.T, id string) *protocol.Keys {
	t.Helper()
	k := newKeys(t)
	if _, _, err := r.admin.RegisterSite(t.Context(), id, k.Public()); err != nil {
		t.Fatal(err)
	}
	return k
}

func TestRegisteringASiteAddsItAndRefusesDuplicates(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	k := r.site(t, "site-a")
	p := r.projection(t)
	if got, ok := p.SiteIDForKey(k.KeyID()); !ok || got != "site-a" {
		t.Fatalf("SiteIDForKey = %q, %v", got, ok)
	}
	forged := newKeys(t).Public()
	forged.Encryption = k.Public().Encryption
	other := newKeys(t)
	before := r.state(t)
	for _, tc := range []struct {
		name   string
		id     string
		site   protocol.PublicIdentity
		status int
	}{
		{"an id already registered", "site-a", other.Public(), http.StatusConflict},
		{"an id longer than the relay carries", strings.Repeat("s", store.MaxSiteIDBytes+1), other.Public(), http.StatusBadRequest},
		{"a key another site has", "site-b", k.Public(), http.StatusConflict},
		{"an encryption key its identity did not sign", "site-b", forged, http.StatusBadRequest},
		{"an empty id", "", other.Public(), http.StatusBadRequest},
	} {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			_, _, err := r.admin.RegisterSite(ctx, tc.id, tc.site)
			refusal(t, err, tc.status)
		})
	}
	if r.state(t) != before {
		t.Fatal("a refused registration changed the projection")
	}
}

func TestRotatingKeepsTheChainRetiresOldKeyAfterWindow(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	k1 := r.site(t, "site-a")
	k2, k3 := newKeys(t), newKeys(t)

	link1, err := protocol.SignSuccession(k1, k2.Public())
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := r.admin.RotateSite(ctx, "site-a", k2.Public(), link1)
	if err != nil {
		t.Fatal(err)
	}
	wantUntil := epoch.UnixMilli() + protocol.RetirementWindowMs
	if rec.Site != k2.Public() || len(rec.Succeeds) != 1 || rec.RetiringUntil != wantUntil {
		t.Fatalf("after one rotation: %+v (want retiringUntil %d)", rec, wantUntil)
	}

	// A succession signed by a key the site no longer has is refused, even
	// though its signature is genuine: it would fork the chain.
	stale, _ := protocol.SignSuccession(k1, k3.Public())
	_, _, err = r.admin.RotateSite(ctx, "site-a", k3.Public(), stale)
	refusal(t, err, http.StatusBadRequest)

	r.clock.Advance(time.Hour)
	link2, _ := protocol.SignSuccession(k2, k3.Public())
	rec, _, err = r.admin.RotateSite(ctx, "site-a", k3.Public(), link2)
	if err != nil {
		t.Fatal(err)
	}
	if rec.RetiringUntil != wantUntil+time.Hour.Milliseconds() {
		t.Fatalf("retiringUntil %d, want the second rotation's", rec.RetiringUntil)
	}
	// A daemon that pinned k1 walks the stored chain from k3 back to it.
	site, _ := r.projection(t).SiteFor("site-a")
	walk := protocol.WalkSuccession(k3.KeyID(), site.Succeeds, func(id string) bool { return id == k1.KeyID() })
	if walk.From != k1.KeyID() || len(walk.Path) != 3 {
		t.Fatalf("walk %+v, want k1 reached through k2", walk)
	}
}

func TestARotationNeedsTheSitesCurrentKeysSignature(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	k1 := r.site(t, "site-a")
	k2, stranger := newKeys(t), newKeys(t)
	r.site(t, "site-b")
	taken, _ := r.projection(t).SiteFor("site-b")

	byStranger, _ := protocol.SignSuccession(stranger, k2.Public())
	forOtherKey, _ := protocol.SignSuccession(k1, newKeys(t).Public())
	toTaken, _ := protocol.SignSuccession(k1, taken.Site)
	good, _ := protocol.SignSuccession(k1, k2.Public())
	tampered := good
	tampered.Signature = forOtherKey.Signature
	before := r.state(t)
	for _, tc := range []struct {
		name   string
		site   string
		next   protocol.PublicIdentity
		link   protocol.Succession
		status int
	}{
		{"a succession by another key", "site-a", k2.Public(), byStranger, http.StatusBadRequest},
		{"a succession naming another successor", "site-a", k2.Public(), forOtherKey, http.StatusBadRequest},
		{"a tampered signature", "site-a", k2.Public(), tampered, http.StatusBadRequest},
		{"a key another site has", "site-a", taken.Site, toTaken, http.StatusConflict},
		{"an unknown site", "site-z", k2.Public(), good, http.StatusNotFound},
	} {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			_, _, err := r.admin.RotateSite(ctx, tc.site, tc.next, tc.link)
			refusal(t, err, tc.status)
		})
	}
	if r.state(t) != before {
		t.Fatal("a refused rotation changed the projection")
	}
}

func TestApprovalMakesTheDeviceKnownUnderANewRunnerID(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	device := newKeys(t)
	code := r.pending(t, device, "laptop")

	shown, err := r.admin.PendingPairing(ctx, " "+strings.ToLower(code)+" ")
	if err != nil {
		t.Fatal(err)
	}
	if shown.Fingerprint != device.KeyID() || shown.Label != "laptop" {
		t.Fatalf("pending pairing shown as %+v", shown)
	}

	a, _, err := r.admin.ApprovePairing(ctx, code, "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(a.Device.RunnerID, "runner_") || len(a.Device.RunnerID) != len("runner_")+36 {
		t.Fatalf("minted runner id %q, want runner_<uuid>", a.Device.RunnerID)
	}
	got, ok := r.projection(t).DeviceByIdentity(device.Public().Identity)
	if !ok || got.Owner != "alice" || got.RunnerID != a.Device.RunnerID {
		t.Fatalf("projection has %+v, %v", got, ok)
	}

	// The same keys again (a second start, before the daemon polled) are
	// refused rather than re-owned.
	again := r.pending(t, device, "laptop")
	_, _, err = r.admin.ApprovePairing(ctx, again, "mallory", "")
	refusal(t, err, http.StatusConflict)
}

func TestApprovalRefusals(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	code := r.pending(t, newKeys(t), "one")
	if _, _, err := r.admin.ApprovePairing(ctx, r.pending(t, newKeys(t), "two"), "bob", "runner_taken"); err != nil {
		t.Fatal(err)
	}
	expiring := r.pending(t, newKeys(t), "three")
	before := r.state(t)
	r.clock.Advance(time.Duration(store.PairingCodeTTLMs-1) * time.Millisecond)
	_ = expiring
	for _, tc := range []struct {
		name, code, owner, runner string
		status                    int
	}{
		{"an unknown code", "ZZZZ-ZZZZ", "alice", "", http.StatusNotFound},
		{"a code far longer than any code", strings.Repeat("Z", 3000), "alice", "", http.StatusBadRequest},
		{"no owner", code, "", "", http.StatusBadRequest},
		{"a runner id already taken", code, "alice", "runner_taken", http.StatusConflict},
		// The relay could never route for these (store.Max*).
		{"a runner id longer than the relay carries", code, "alice", strings.Repeat("r", store.MaxRunnerIDBytes+1), http.StatusBadRequest},
		{"an owner longer than the relay carries", code, strings.Repeat("o", store.MaxOwnerBytes+1), "", http.StatusBadRequest},
	} {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			_, _, err := r.admin.ApprovePairing(ctx, tc.code, tc.owner, tc.runner)
			refusal(t, err, tc.status)
		})
	}
	r.clock.Advance(time.Millisecond)
	t.Run("refuses an expired code", func(t *testing.T) {
		_, _, err := r.admin.ApprovePairing(ctx, expiring, "alice", "")
		refusal(t, err, http.StatusNotFound)
	})
	if r.state(t) != before {
		t.Fatal("a refused approval changed the projection")
	}
}

func TestRevokedDevicePairsAgainOldRunnerStaysRevoked(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	device := newKeys(t)
	first, _, err := r.admin.ApprovePairing(ctx, r.pending(t, device, "laptop"), "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.admin.RevokeDevice(ctx, first.Device.RunnerID); err != nil {
		t.Fatal(err)
	}
	if !r.projection(t).RevokedDevice(first.Device.RunnerID) {
		t.Fatal("revoked device not revoked")
	}
	second, _, err := r.admin.ApprovePairing(ctx, r.pending(t, device, "laptop"), "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	p := r.projection(t)
	// The pairing poll takes the first record with the key: the new one.
	if got, _ := p.DeviceByIdentity(device.Public().Identity); got.RunnerID != second.Device.RunnerID {
		t.Fatalf("pairing poll would find %q, want the new runner %q", got.RunnerID, second.Device.RunnerID)
	}
	if !p.RevokedDevice(first.Device.RunnerID) || p.RevokedDevice(second.Device.RunnerID) {
		t.Fatal("the old runner must stay revoked and the new one must not be")
	}
	_, _, err = r.admin.RevokeDevice(ctx, "runner_nobody")
	refusal(t, err, http.StatusNotFound)
}

func TestConsentAddPauseResumeRevoke(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	r.site(t, "site-a")
	route := func() bool { return r.projection(t).MayRouteFor("alice", "site-a") }
	consented := func() bool { _, ok := r.projection(t).ConsentFor("alice", "site-a"); return ok }

	_, _, err := r.admin.AddConsent(ctx, "alice", "site-unregistered")
	refusal(t, err, http.StatusNotFound)
	_, _, err = r.admin.PauseConsent(ctx, "alice", "site-a")
	refusal(t, err, http.StatusNotFound)

	steps := []struct {
		name                 string
		do                   func() (controlplane.ConsentState, int64, error)
		route, consent       bool
		wantPaused, wantGone bool
	}{
		{"add", func() (controlplane.ConsentState, int64, error) { return r.admin.AddConsent(ctx, "alice", "site-a") }, true, true, false, false},
		{"pause", func() (controlplane.ConsentState, int64, error) { return r.admin.PauseConsent(ctx, "alice", "site-a") }, false, true, true, false},
		{"resume", func() (controlplane.ConsentState, int64, error) { return r.admin.ResumeConsent(ctx, "alice", "site-a") }, true, true, false, false},
		{"revoke", func() (controlplane.ConsentState, int64, error) { return r.admin.RevokeConsent(ctx, "alice", "site-a") }, false, false, false, true},
		{"revoke again", func() (controlplane.ConsentState, int64, error) { return r.admin.RevokeConsent(ctx, "alice", "site-a") }, false, false, false, true},
		{"add after revoke", func() (controlplane.ConsentState, int64, error) { return r.admin.AddConsent(ctx, "alice", "site-a") }, true, true, false, false},
	}
	for _, s := range steps {
		state, _, err := s.do()
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if state.Paused != s.wantPaused || state.Revoked != s.wantGone {
			t.Fatalf("%s: state %+v", s.name, state)
		}
		if route() != s.route || consented() != s.consent {
			t.Fatalf("%s: mayRoute=%v consent=%v, want %v %v", s.name, route(), consented(), s.route, s.consent)
		}
	}
	_, _, err = r.admin.AddConsent(ctx, "alice", "site-a")
	refusal(t, err, http.StatusConflict)
	f, _ := r.store.Fixture(ctx)
	if len(f.Consents) != 1 || len(f.Revoked) != 0 {
		t.Fatalf("consents %+v revoked %+v: want one record and no revocation", f.Consents, f.Revoked)
	}
}

func TestRostersAreSetReplacedAndDeleted(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	if _, _, err := r.admin.PutRoster(ctx, "team", "alice", []string{"bob", "carol"}); err != nil {
		t.Fatal(err)
	}
	if got := r.projection(t).OwnersRunnableBy("alice"); strings.Join(got, ",") != "alice,bob,carol" {
		t.Fatalf("owners %v", got)
	}
	if _, _, err := r.admin.PutRoster(ctx, "team", "alice", []string{"dave"}); err != nil {
		t.Fatal(err)
	}
	if got := r.projection(t).OwnersRunnableBy("alice"); strings.Join(got, ",") != "alice,dave" {
		t.Fatalf("after replace, owners %v", got)
	}
	if _, err := r.admin.DeleteRoster(ctx, "team"); err != nil {
		t.Fatal(err)
	}
	if got := r.projection(t).OwnersRunnableBy("alice"); len(got) != 1 {
		t.Fatalf("after delete, owners %v", got)
	}
	_, err := r.admin.DeleteRoster(ctx, "team")
	refusal(t, err, http.StatusNotFound)
	_, _, err = r.admin.PutRoster(ctx, "team", "alice", []string{""})
	refusal(t, err, http.StatusBadRequest)
}

func TestImportReplacesProjectionRefusesBadIdentities(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	r.site(t, "old-site")
	k1, k2, dev := newKeys(t), newKeys(t), newKeys(t)
	link, _ := protocol.SignSuccession(k1, k2.Public())
	good := projection.Fixture{
		Sites:    []projection.SiteRecord{{SiteID: "s", Site: k2.Public(), Succeeds: []protocol.Succession{link}, RetiringUntil: 5}},
		Consents: []projection.ConsentRecord{{Owner: "o", SiteID: "s"}},
		Devices:  []projection.DeviceRecord{{Owner: "o", RunnerID: "r", Device: dev.Public()}},
	}
	if _, err := r.admin.Import(ctx, good); err != nil {
		t.Fatal(err)
	}
	p := r.projection(t)
	if _, ok := p.SiteFor("old-site"); ok {
		t.Fatal("import did not replace the projection")
	}
	if !p.MayRouteFor("o", "s") {
		t.Fatal("imported consent does not route")
	}

	before := r.state(t)
	brokenChain := good
	brokenChain.Sites = []projection.SiteRecord{{SiteID: "s", Site: newKeys(t).Public(), Succeeds: []protocol.Succession{link}}}
	forgedDevice := good
	forged := dev.Public()
	forged.Encryption = k1.Public().Encryption
	forgedDevice.Devices = []projection.DeviceRecord{{Owner: "o", RunnerID: "r", Device: forged}}
	emptyOwner := good
	emptyOwner.Consents = []projection.ConsentRecord{{Owner: "", SiteID: "s"}}
	for name, f := range map[string]projection.Fixture{
		"a chain that does not lead to the current key": brokenChain,
		"a device with a forged encryption key":         forgedDevice,
		"an empty owner":                                emptyOwner,
	} {
		t.Run("refuses "+name, func(t *testing.T) {
			_, err := r.admin.Import(ctx, f)
			refusal(t, err, http.StatusBadRequest)
		})
	}
	if r.state(t) != before {
		t.Fatal("a refused import changed the projection")
	}
}

func TestDenyingAUserCodeDropsItAndApprovesNobody(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	device := newKeys(t)
	code := r.pending(t, device, "stranger's laptop")
	before := r.state(t)

	denied, err := r.admin.DenyPairing(ctx, code)
	if err != nil {
		t.Fatal(err)
	}
	if denied.Fingerprint != device.KeyID() || denied.Label != "stranger's laptop" {
		t.Fatalf("denied %+v", denied)
	}
	if _, err := r.admin.PendingPairing(ctx, code); err == nil {
		t.Fatal("a denied code still resolves")
	}
	_, _, err = r.admin.ApprovePairing(ctx, code, "alice", "")
	refusal(t, err, http.StatusNotFound)
	_, err = r.admin.DenyPairing(ctx, code)
	refusal(t, err, http.StatusNotFound)
	if r.state(t) != before {
		t.Fatal("denying a pairing changed the projection")
	}
	if _, ok := r.projection(t).DeviceByIdentity(device.Public().Identity); ok {
		t.Fatal("a denied device is in the projection")
	}
}
