package controlplane

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"mime"
	"net/http"
	"strings"
)

// EnvAdminToken names the environment variable that carries the local
// stack's admin token to the CLI and the demo.
const EnvAdminToken = "BYORELAY_ADMIN_TOKEN"

// ConsolePath is the local operator console: the page the local stack names
// as its verification URL, so the URL a daemon prints opens it.
const ConsolePath = AdminPrefix + "/pairings"

// NewAdminToken is a fresh token for one run of the local stack: 32 random
// bytes, URL-safe, so it fits a header, a URL fragment and an env file.
func NewAdminToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// GuardConfig is what LocalGuard checks.
type GuardConfig struct {
	// Token every admin call must carry as "Authorization: Bearer <token>".
	// Required: a guard with no token refuses everything.
	Token string
	// Hosts are the Host header values the stack answers to (host:port).
	// Empty accepts any, which is right only when the admin API is served
	// on purpose to other machines (`serve --expose-admin`).
	Hosts []string
}

// LocalGuard puts the local stack's stand-in for IAM in front of the admin
// API, and serves the operator console. Deployed, API Gateway's IAM
// authoriser refuses an unsigned call before the admin function runs;
// locally nothing would, and a web page the developer visits could post
// to http://127.0.0.1:8787/admin (a "simple" cross-origin request needs no
// preflight). So every call under /admin must pass, in this order:
//
//   - the Host header names this stack (DNS rebinding: a hostile name
//     resolved to 127.0.0.1 makes the browser call it same-origin);
//   - no sign of another origin: Sec-Fetch-Site is absent, "same-origin" or
//     "none", and Origin is absent or this stack's own;
//   - the bearer token. A browser never attaches an Authorization header
//     on its own (no cookie, no ambient credential), and a page cannot set
//     one cross-origin without a CORS preflight, which this server never
//     answers, so the token alone defeats cross-site requests; the checks
//     above are a second wall;
//   - a body, when there is one, declared application/json: text/plain and
//     form posts are what a cross-site form or beacon sends.
//
// The console's own files (the page and its script) hold no data and are
// served without the token: the person types or pastes the token into the
// page, and the page sends it on every call as the CLI does.
func LocalGuard(cfg GuardConfig, next http.Handler) http.Handler {
	console := consoleHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != AdminPrefix && !strings.HasPrefix(r.URL.Path, AdminPrefix+"/") {
			next.ServeHTTP(w, r)
			return
		}
		if len(cfg.Hosts) > 0 && !hostAllowed(r.Host, cfg.Hosts) {
			refuse(w, http.StatusForbidden, "forbidden", "this admin API does not answer to host "+r.Host)
			return
		}
		if isConsoleFile(r) {
			console.ServeHTTP(w, r)
			return
		}
		if reason := crossOrigin(r); reason != "" {
			refuse(w, http.StatusForbidden, "forbidden", reason)
			return
		}
		if !bearer(r, cfg.Token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="byorelay admin"`)
			refuse(w, http.StatusUnauthorized, "unauthorized",
				"the local admin API needs its token: Authorization: Bearer $"+EnvAdminToken+" (serve prints it and writes it to the demo dir's stack.env)")
			return
		}
		if reason := bodyType(r); reason != "" {
			refuse(w, http.StatusUnsupportedMediaType, "unsupported-media-type", reason)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func hostAllowed(host string, allowed []string) bool {
	for _, h := range allowed {
		if strings.EqualFold(host, h) {
			return true
		}
	}
	return false
}

// crossOrigin says why a request looks like it came from another origin's
// page, or "" when it does not. Requests from the CLI carry neither header.
func crossOrigin(r *http.Request) string {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return "a " + site + " request may not use the admin API"
	}
	origin := r.Header.Get("Origin")
	if origin != "" && !strings.EqualFold(origin, "http://"+r.Host) && !strings.EqualFold(origin, "https://"+r.Host) {
		return "a request from origin " + origin + " may not use the admin API"
	}
	return ""
}

func bearer(r *http.Request, token string) bool {
	if token == "" {
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(token)) == 1
}

// bodyType refuses any body that is not declared JSON, and any declared
// type but JSON even on an empty body: every admin call that sends a body
// sends JSON, and the types a cross-site form can send are exactly the
// others.
func bodyType(r *http.Request) string {
	ct := r.Header.Get("Content-Type")
	hasBody := r.ContentLength > 0 || len(r.TransferEncoding) > 0
	if ct == "" {
		if hasBody {
			return "a request body must be sent as application/json"
		}
		return ""
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return "the admin API takes application/json, not " + ct
	}
	return ""
}

func refuse(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, ErrorResponse{Error: code, Message: message})
}
