package apiserver_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/internal/controlplane"
)

// Deployed, the admin API is IAM-authorised and no browser reaches it, so
// the catch-all function serves the verification page a deployment names
// (VerificationUrl https://<ApiUrl>/approve): it tells the person what to
// give their operator. Any other method there is the relay's, as before.
func TestTheCatchAllServesTheDeployedVerificationPage(t *testing.T) {
	st := startStack(t)
	resp, err := http.Get(st.baseURL + controlplane.ApprovePagePath + "?code=K7TZ-9F2Q")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(string(page), "Give your operator") || !strings.Contains(string(page), "byorelay admin approve") ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Fatalf("GET %s: %d %v\n%s", controlplane.ApprovePagePath, resp.StatusCode, resp.Header, page)
	}

	resp, err = http.Post(st.baseURL+controlplane.ApprovePagePath, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || string(body) != `{"error":"not-found"}` {
		t.Fatalf("POST %s: %d %s, want the relay's 404", controlplane.ApprovePagePath, resp.StatusCode, body)
	}
}
