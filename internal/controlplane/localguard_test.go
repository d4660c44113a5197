package controlplane_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/internal/controlplane"
)

// The local admin API answers its own operator and nobody else: not a
// caller without the token, not a web page on another origin (even one that
// somehow holds the token), not a hostile DNS name pointed at loopback, and
// not a form or text/plain post. Every refusal leaves the projection as it
// was.
func TestTheLocalGuardRefusesEverythingButTheOperator(t *testing.T) {
	s := controlplane.NewStore(controlplane.NewMemoryStorage())
	admin := controlplane.NewAdmin(controlplane.AdminConfig{Store: s, Logger: slog.New(slog.DiscardHandler)})
	token, err := controlplane.NewAdminToken()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(nil)
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	srv.Config.Handler = controlplane.LocalGuard(controlplane.GuardConfig{Token: token, Hosts: []string{host}}, controlplane.AdminHandler(admin))

	roster := `{"owner":"alice","members":["bob"]}`
	type call struct {
		name    string
		header  map[string]string
		ctype   string
		host    string
		want    int
		changed bool
	}
	auth := "Bearer " + token
	for i, c := range []call{
		{name: "no token", ctype: "application/json", want: http.StatusUnauthorized},
		{name: "a wrong token", header: map[string]string{"Authorization": "Bearer x" + token}, ctype: "application/json", want: http.StatusUnauthorized},
		{name: "the token as a basic credential", header: map[string]string{"Authorization": "Basic " + token}, ctype: "application/json", want: http.StatusUnauthorized},
		{name: "a cross-site fetch", header: map[string]string{"Authorization": auth, "Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, ctype: "application/json", want: http.StatusForbidden},
		{name: "a same-site fetch from another port", header: map[string]string{"Authorization": auth, "Sec-Fetch-Site": "same-site"}, ctype: "application/json", want: http.StatusForbidden},
		{name: "another origin without fetch metadata", header: map[string]string{"Authorization": auth, "Origin": "http://127.0.0.1:1"}, ctype: "application/json", want: http.StatusForbidden},
		{name: "an opaque origin", header: map[string]string{"Authorization": auth, "Origin": "null"}, ctype: "application/json", want: http.StatusForbidden},
		{name: "a DNS-rebound host name", header: map[string]string{"Authorization": auth}, host: "evil.example:80", ctype: "application/json", want: http.StatusForbidden},
		{name: "a text/plain post", header: map[string]string{"Authorization": auth}, ctype: "text/plain", want: http.StatusUnsupportedMediaType},
		{name: "a form post", header: map[string]string{"Authorization": auth}, ctype: "application/x-www-form-urlencoded", want: http.StatusUnsupportedMediaType},
		{name: "a multipart post", header: map[string]string{"Authorization": auth}, ctype: "multipart/form-data; boundary=x", want: http.StatusUnsupportedMediaType},
		{name: "a body with no type", header: map[string]string{"Authorization": auth}, want: http.StatusUnsupportedMediaType},
		{name: "the page's own same-origin fetch", header: map[string]string{"Authorization": auth, "Sec-Fetch-Site": "same-origin", "Origin": srv.URL}, ctype: "application/json", want: http.StatusOK, changed: true},
		{name: "the CLI", header: map[string]string{"Authorization": auth}, ctype: "application/json; charset=utf-8", want: http.StatusOK, changed: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			before, err := s.Fixture(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest(http.MethodPut, srv.URL+"/admin/rosters/team-"+strconv.Itoa(i), strings.NewReader(roster))
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			if c.ctype != "" {
				req.Header.Set("Content-Type", c.ctype)
			}
			if c.host != "" {
				req.Host = c.host
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Fatalf("%d %s, want %d", resp.StatusCode, body, c.want)
			}
			if c.want != http.StatusOK && !strings.Contains(string(body), `"error":`) {
				t.Fatalf("a refusal without an error body: %s", body)
			}
			after, err := s.Fixture(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if changed := len(after.Rosters) != len(before.Rosters); changed != c.changed {
				t.Fatalf("projection changed: %v, want %v", changed, c.changed)
			}
		})
	}

	// The console page itself carries no data and is served without the
	// token, unframeable and with a script policy that admits only itself.
	resp, err := http.Get(srv.URL + controlplane.ConsolePath)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	csp := resp.Header.Get("Content-Security-Policy")
	if resp.StatusCode != 200 || !strings.Contains(string(page), "operator console") ||
		!strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'sha256-") ||
		resp.Header.Get("X-Frame-Options") != "DENY" {
		t.Fatalf("console: %d %v\n%.200s", resp.StatusCode, resp.Header, page)
	}
	// A pending pairing by code, and the list of them, are data: token
	// only, and never to another origin's page even with it.
	for _, c := range []struct {
		path   string
		header map[string]string
		want   int
	}{
		{"/ABCD-EFGH", nil, http.StatusUnauthorized},
		{"/pending", nil, http.StatusUnauthorized},
		{"/pending", map[string]string{"Authorization": auth, "Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, http.StatusForbidden},
	} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+controlplane.ConsolePath+c.path, nil)
		for k, v := range c.header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Fatalf("GET %s with %v: %d, want %d", c.path, c.header, resp.StatusCode, c.want)
		}
	}
}

func TestAGuardWithoutATokenRefusesEverything(t *testing.T) {
	s := controlplane.NewStore(controlplane.NewMemoryStorage())
	admin := controlplane.NewAdmin(controlplane.AdminConfig{Store: s, Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(controlplane.LocalGuard(controlplane.GuardConfig{}, controlplane.AdminHandler(admin)))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/admin/fixture", nil)
	req.Header.Set("Authorization", "Bearer ")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("%d", resp.StatusCode)
	}
}
