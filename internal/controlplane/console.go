package controlplane

import (
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"net/http"
	"strings"
)

// ApprovePagePath is where a deployment's catch-all function serves the
// page a person lands on from the verification URL when the relay is its
// own control plane (VerificationUrl https://<ApiUrl>/approve). The admin
// API itself is IAM-authorised there, so a browser cannot reach it; this
// page tells the person what to give their operator instead.
const ApprovePagePath = "/approve"

//go:embed console
var consoleFiles embed.FS

// page is one self-contained HTML page: its script and style inline, and a
// Content-Security-Policy that allows exactly those (by hash) and nothing
// else, so no injected markup can run, the page cannot be framed, and it
// can talk to its own origin only.
type page struct {
	body []byte
	csp  string
}

func loadPage(html, script, style string) page {
	read := func(name string) string {
		b, err := consoleFiles.ReadFile("console/" + name)
		if err != nil {
			panic("controlplane: embedded page file missing: " + name) // a build defect, not a runtime condition
		}
		return string(b)
	}
	js, css := read(script), read(style)
	body := strings.Replace(read(html), "<style>/*style*/</style>", "<style>"+css+"</style>", 1)
	body = strings.Replace(body, "<script>/*script*/</script>", "<script>"+js+"</script>", 1)
	hash := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	return page{
		body: []byte(body),
		csp: "default-src 'none'; script-src " + hash(js) + "; style-src " + hash(css) +
			"; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	}
}

func (p page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", p.csp)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(p.body)
	}
}

// consoleHandler is the local operator console.
func consoleHandler() http.Handler { return loadPage("console.html", "console.js", "style.css") }

// isConsoleFile reports whether r asks for the console page itself.
func isConsoleFile(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.URL.Path == ConsolePath
}

// ApprovePage is the deployed verification page (see ApprovePagePath). It
// reads nothing and changes nothing.
func ApprovePage() http.Handler { return loadPage("approve.html", "approve.js", "style.css") }
