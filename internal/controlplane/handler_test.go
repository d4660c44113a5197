package controlplane_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

func serve(t *testing.T, r *rig) (*httptest.Server, *controlplane.Client) {
	t.Helper()
	srv := httptest.NewServer(controlplane.AdminHandler(r.admin))
	t.Cleanup(srv.Close)
	return srv, controlplane.NewClient(srv.URL, srv.Client())
}

// adminRefusal sends one request to the admin API and decodes its answer
// as the API's error body; err is the decode's.
func adminRefusal(t *testing.T, srv *httptest.Server, method, path, body string) (*http.Response, []byte, controlplane.ErrorResponse, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var refusal controlplane.ErrorResponse
	err = json.Unmarshal(data, &refusal)
	return resp, data, refusal, err
}

func TestTheAdminAPIDrivesEveryChange(t *testing.T) {
	r := newRig(t)
	_, c := serve(t, r)
	ctx := t.Context()
	k1, k2, device := newKeys(t), newKeys(t), newKeys(t)

	site, err := c.RegisterSite(ctx, controlplane.RegisterSiteRequest{SiteID: "site/a", Site: k1.Public()})
	if err != nil || site.Site.SiteID != "site/a" || site.Version == 0 {
		t.Fatalf("register: %+v %v", site, err)
	}
	link, _ := protocol.SignSuccession(k1, k2.Public())
	rotated, err := c.RotateSite(ctx, "site/a", controlplane.RotateSiteRequest{Site: k2.Public(), Succession: link})
	if err != nil || rotated.Site.Site != k2.Public() || len(rotated.Site.Succeeds) != 1 {
		t.Fatalf("rotate: %+v %v", rotated, err)
	}
	if _, err := c.Consent(ctx, controlplane.ConsentAdd, controlplane.ConsentRequest{Owner: "alice", SiteID: "site/a"}); err != nil {
		t.Fatal(err)
	}
	paused, err := c.Consent(ctx, controlplane.ConsentPause, controlplane.ConsentRequest{Owner: "alice", SiteID: "site/a"})
	if err != nil || !paused.Consent.Paused {
		t.Fatalf("pause: %+v %v", paused, err)
	}
	code := r.pending(t, device, "desk")
	shown, err := c.Pairing(ctx, code)
	if err != nil || shown.Fingerprint != device.KeyID() {
		t.Fatalf("pairing: %+v %v", shown, err)
	}
	approved, err := c.Approve(ctx, controlplane.ApproveRequest{UserCode: code, Owner: "alice", RunnerID: "runner_desk"})
	if err != nil || approved.Device.RunnerID != "runner_desk" || approved.Label != "desk" {
		t.Fatalf("approve: %+v %v", approved, err)
	}
	revoked, err := c.RevokeDevice(ctx, "runner_desk")
	if err != nil || revoked.Device.Revoked == nil || !*revoked.Device.Revoked {
		t.Fatalf("revoke: %+v %v", revoked, err)
	}
	if _, err := c.PutRoster(ctx, "team/1", controlplane.RosterRequest{Owner: "alice", Members: []string{"bob"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteRoster(ctx, "team/1"); err != nil {
		t.Fatal(err)
	}

	p := r.projection(t)
	if !p.RevokedDevice("runner_desk") || p.MayRouteFor("alice", "site/a") || len(p.OwnersRunnableBy("alice")) != 1 {
		t.Fatal("the projection does not show the changes made through the API")
	}

	// An export imports back unchanged.
	exported, err := c.ExportJSON(ctx)
	if err != nil {
		t.Fatalf("export: %v", err)
	}
	res, err := c.Import(ctx, exported)
	if err != nil || res.Version == 0 {
		t.Fatalf("import: %+v %v", res, err)
	}
	again, err := c.ExportJSON(ctx)
	if err != nil || string(again) != string(exported) {
		t.Fatalf("the re-imported export differs:\n%s\n%s", exported, again)
	}
}

// The operator's list: the live pending pairings, newest first, each as
// the typed-code lookup shows it and never with its device code, bounded,
// and each decided by the user code it lists.
func TestPendingPairingsListNewestFirstWithoutCodes(t *testing.T) {
	r := newRig(t)
	srv, c := serve(t, r)
	ctx := t.Context()
	list, err := c.PendingPairings(ctx)
	if err != nil || len(list.Pairings) != 0 || list.More || list.Now != clock.EpochMs(epoch) {
		t.Fatalf("an empty list: %+v %v", list, err)
	}

	desk, laptop, phone := newKeys(t), newKeys(t), newKeys(t)
	deskCode := r.pending(t, desk, "desk")
	r.clock.Advance(time.Second)
	laptopCode := r.pending(t, laptop, "laptop")
	r.clock.Advance(time.Second)
	phoneCode := r.pending(t, phone, "phone")
	list, err = c.PendingPairings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, p := range list.Pairings {
		codes = append(codes, p.UserCode)
	}
	if !slices.Equal(codes, []string{phoneCode, laptopCode, deskCode}) || list.More {
		t.Fatalf("listed %v (more %v), want newest first %v", codes, list.More, []string{phoneCode, laptopCode, deskCode})
	}
	byCode, err := c.Pairing(ctx, laptopCode)
	if err != nil || !reflect.DeepEqual(list.Pairings[1], byCode) {
		t.Fatalf("the list shows\n %+v\nthe lookup by code\n %+v (%v)", list.Pairings[1], byCode, err)
	}
	if p := list.Pairings[0]; p.Fingerprint != phone.KeyID() || p.Label != "phone" || p.Platform != "linux" ||
		p.DaemonVersion != "0.1.1" || p.ExpiresAt != clock.EpochMs(epoch)+2000+store.PairingCodeTTLMs || list.Now != clock.EpochMs(epoch)+2000 {
		t.Fatalf("the newest: %+v at %d", p, list.Now)
	}

	// No device code on the wire: not as a key, not as a value.
	resp, err := srv.Client().Get(srv.URL + "/admin/pairings/pending")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(strings.ToLower(string(raw)), "devicecode") {
		t.Fatalf("the list names device codes: %s", raw)
	}
	for _, p := range []*protocol.Keys{desk, laptop, phone} {
		held, ok, err := r.pairings.PairingByUserCode(ctx, map[*protocol.Keys]string{desk: deskCode, laptop: laptopCode, phone: phoneCode}[p])
		if err != nil || !ok || strings.Contains(string(raw), held.DeviceCode) {
			t.Fatalf("the list carries a device code, or the pairing is gone: %v %v", ok, err)
		}
	}

	// Decided by the codes the list gives, they leave it.
	if _, err := c.Approve(ctx, controlplane.ApproveRequest{UserCode: list.Pairings[0].UserCode, Owner: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Deny(ctx, controlplane.DenyRequest{UserCode: list.Pairings[1].UserCode}); err != nil {
		t.Fatal(err)
	}
	// The relay drops an approved code on the daemon's next poll; until
	// then it is listed as approved, under its new runner id.
	list, err = c.PendingPairings(ctx)
	if err != nil || len(list.Pairings) != 2 || list.Pairings[0].UserCode != phoneCode || list.Pairings[1].UserCode != deskCode ||
		!strings.HasPrefix(list.Pairings[0].ApprovedAs, "runner_") || list.Pairings[1].ApprovedAs != "" {
		t.Fatalf("after approving the phone and denying the laptop: %+v %v", list, err)
	}
	if again, err := c.Pairing(ctx, phoneCode); err != nil || again.ApprovedAs != list.Pairings[0].ApprovedAs {
		t.Fatalf("the lookup of an approved code: %+v %v", again, err)
	}

	// Bounded: the newest MaxListedPairings, and word that there are more.
	// A second later than the phone, so no flood code ties with it on age.
	r.clock.Advance(time.Second)
	for range controlplane.MaxListedPairings {
		r.pending(t, newKeys(t), "flood")
	}
	list, err = c.PendingPairings(ctx)
	if err != nil || len(list.Pairings) != controlplane.MaxListedPairings || !list.More || list.Pairings[0].Label != "flood" {
		t.Fatalf("over the bound: %d listed, more %v, %v", len(list.Pairings), list.More, err)
	}

	// Expired codes are not listed.
	r.clock.Advance(time.Duration(store.PairingCodeTTLMs) * time.Millisecond)
	list, err = c.PendingPairings(ctx)
	if err != nil || len(list.Pairings) != 0 || list.More {
		t.Fatalf("after every code expired: %+v %v", list, err)
	}
}

func TestBadAdminBodiesGetAJSONErrorAndChangeNothing(t *testing.T) {
	r := newRig(t)
	srv, _ := serve(t, r)
	r.site(t, "site-a")
	before := r.state(t)
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"a fixture that is not JSON", "PUT", "/admin/fixture", "{", 400, "bad-request"},
		{"a fixture with an unknown key", "PUT", "/admin/fixture", `{"consents":[],"terms":[]}`, 400, "bad-request"},
		{"a fixture without consents", "PUT", "/admin/fixture", `{"sites":[]}`, 400, "bad-request"},
		{"a consent with an unknown key", "POST", "/admin/consents", `{"owner":"a","siteId":"site-a","paused":true}`, 400, "bad-request"},
		{"a consent with a null", "POST", "/admin/consents", `{"owner":null,"siteId":"site-a"}`, 400, "bad-request"},
		{"an approval without owner", "POST", "/admin/pairings/approve", `{"userCode":"ABCD-EFGH"}`, 400, "bad-request"},
		{"a site with a broken identity", "POST", "/admin/sites", `{"siteId":"b","site":{"identity":"x","encryption":"y","encryptionSig":"z"}}`, 400, "bad-request"},
		{"an unknown route", "POST", "/admin/nothing", `{}`, 404, "not-found"},
		{"the wrong method", "DELETE", "/admin/fixture", ``, 404, "not-found"},
	} {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			resp, data, body, err := adminRefusal(t, srv, tc.method, tc.path, tc.body)
			if err != nil || resp.StatusCode != tc.status || body.Error != tc.code || body.Message == "" {
				t.Fatalf("got %d %s, want %d %q with a message", resp.StatusCode, data, tc.status, tc.code)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("content-type %q", ct)
			}
		})
	}
	if r.state(t) != before {
		t.Fatal("a refused request changed the projection")
	}
}

func TestTheClientReportsARefusalAsAnError(t *testing.T) {
	r := newRig(t)
	_, c := serve(t, r)
	_, err := c.RevokeDevice(t.Context(), "runner_nobody")
	var e *controlplane.Error
	if !errors.As(err, &e) || e.Status != http.StatusNotFound || e.Code != "not-found" || !strings.Contains(e.Message, "runner_nobody") {
		t.Fatalf("got %#v", err)
	}
}

// Every admin route that reads a JSON body refuses each body that is not
// one JSON object in UTF-8 with a 400 bad-request naming what is wrong,
// and nothing changes.
func TestTheAdminAPISaysWhatIsWrongWithABody(t *testing.T) {
	r := newRig(t)
	srv, _ := serve(t, r)
	r.site(t, "site-a")
	before := r.state(t)
	routes := []struct{ method, path string }{
		{"PUT", "/admin/fixture"}, {"POST", "/admin/sites"}, {"POST", "/admin/sites/site-a/rotate"},
		{"POST", "/admin/pairings/approve"}, {"POST", "/admin/pairings/deny"},
		{"POST", "/admin/consents"}, {"POST", "/admin/consents/pause"}, {"POST", "/admin/consents/resume"},
		{"POST", "/admin/consents/revoke"}, {"PUT", "/admin/rosters/r1"},
	}
	bodies := []struct{ name, raw, message string }{
		{"trailing bytes", `{"owner":"a","siteId":"site-a"} x`, "body has bytes after its JSON value at offset 32"},
		{"BOM", "\xef\xbb\xbf{}", "body starts with a byte-order mark; send the JSON object without one"},
		{"array", `[]`, "body must be a JSON object, got an array"},
		{"string", `"a"`, "body must be a JSON object, got a string"},
		{"number", `1`, "body must be a JSON object, got a number"},
		{"null", `null`, "body must be a JSON object, got null"},
		{"invalid UTF-8", "{\"owner\":\"\xff\"}", "body is not valid UTF-8 at offset 10"},
		{"not JSON", `{"owner":`, "body is not valid JSON: it ends at offset 9 inside its value"},
		{"empty", ``, "body is empty; it must be a JSON object"},
		{"deeply nested", strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000), "body must be a JSON object, got an array"},
	}
	for _, route := range routes {
		for _, b := range bodies {
			t.Run(route.method+" "+route.path+" "+b.name, func(t *testing.T) {
				resp, data, body, err := adminRefusal(t, srv, route.method, route.path, b.raw)
				if err != nil || resp.StatusCode != 400 || body.Error != "bad-request" || body.Message != b.message {
					t.Fatalf("got %d %s, want 400 bad-request %q", resp.StatusCode, data, b.message)
				}
			})
		}
	}
	if r.state(t) != before {
		t.Fatal("a refused request changed the projection")
	}
}
