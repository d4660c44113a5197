// Package audit_test runs the real deployment posture audit,
// byollm-audit-deployment from @byollm/conformance 0.1.1, against byorelay
// deployed the way template.yaml deploys it with the edge options on, all
// on loopback:
//
//	node (the audit) ──https──▶ edge 127.0.0.1:443 ──https + secret──▶ origin 127.0.0.2:443
//	                  ──http───▶ edge 127.0.0.1:80 (301 to https)
//	                  ──https, no secret──────────────────────────────▶ origin 127.0.0.2:443 (403)
//
// The edge stands in for CloudFront (redirect-to-https, the origin custom
// header); the origin is every function of the template behind the local
// API server, opened from environment variables as a Lambda container is,
// with its secret read from SSM (moto) and its state in DynamoDB Local.
// Both present certificates for the test host, signed by a CA this test
// makes and node is told to trust (NODE_EXTRA_CA_CERTS). The host name
// resolves to the edge only inside node, through a preloaded dns.lookup
// (testdata/resolve-host.cjs); nothing on the machine changes.
package audit_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/byorelay/byorelay/internal/lambdafn"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/apiserver"
	"github.com/byorelay/byorelay/store/dynamo"
)

func TestMain(m *testing.M) { localtest.Main(m) }

const (
	// host is the name daemons would pin. .test is reserved (RFC 6761): it
	// can never be somebody's real host.
	host = "relay.byorelay.test"
	// The audit's addresses. 127.0.0.2 is loopback too (all of 127/8 is),
	// so the origin has an address of its own, as it would behind an edge.
	edgeAddr   = "127.0.0.1"
	originAddr = "127.0.0.2"
)

// checks are the audit's eleven, by the ids it prints.
var checks = []string{
	"D001_SITE_ENQUEUE_REFUSES_UNSIGNED",
	"D002_SITE_READS_REFUSE_UNSIGNED",
	"D003_DAEMON_PLANE_REFUSES_UNSIGNED",
	"D004_REFUSES_A_STRANGER_S_VALID_SIGNATURE",
	"D011_VERSION_NAMED_ON_BOTH_PLANES",
	"D005_NO_DEBUG_SURFACE",
	"D006_NO_PATH_DISPATCH",
	"D007_TLS_ONLY",
	"D008_ORIGIN_NOT_PUBLIC",
	"D009_CERT_NAMES_THE_PINNED_HOST",
	"D010_CERT_HAS_LIFE_LEFT",
}

func TestTheAuditPassesElevenOfElevenBehindTheEdge(t *testing.T) {
	node, modules := localtest.RequireNode(t, "@byollm/conformance")
	// The ports first: where they cannot be bound, nothing else is worth
	// starting.
	plain := listen(t, net.JoinHostPort(edgeAddr, "80"))
	edgeTLS := listen(t, net.JoinHostPort(edgeAddr, "443"))
	originTLS := listen(t, net.JoinHostPort(originAddr, "443"))

	ctx := context.Background()
	dir := t.TempDir()
	ca := newCA(t)
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}

	// The secret, where the template keeps it: an SSM parameter.
	secret := randomHex(t)
	moto := localtest.MotoEndpoint(t)
	ddb := localtest.DynamoEndpoint(t)
	parameter := "/" + localtest.UniqueName("audit-origin-secret")
	if _, err := ssm.NewFromConfig(localtest.AWSConfig(moto)).PutParameter(ctx, &ssm.PutParameterInput{
		Name: aws.String(parameter), Value: aws.String(secret), Type: types.ParameterTypeString,
	}); err != nil {
		t.Fatal(err)
	}
	table := localtest.UniqueName("audit")
	if err := dynamo.CreateTable(ctx, localtest.DynamoClient(t), table); err != nil {
		t.Fatal(err)
	}

	// The origin: opened from the environment a deployed function gets.
	localtest.LambdaEnv(t, map[string]string{"dynamodb": ddb, "ssm": moto})
	env, err := lambdafn.LoadEnv(func(k string) string {
		return map[string]string{"TABLE_NAME": table, "ORIGIN_SECRET_PARAMETER": parameter}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := lambdafn.Open(env, lambdafn.Options{Logger: slog.New(slog.DiscardHandler), MetricsOut: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	api, err := apiserver.ForStack(st, apiserver.Config{})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, originTLS, api, ca.leaf(t, host))

	// The edge: what CloudFront does with redirect-to-https and an origin
	// custom header, and nothing more.
	toOrigin := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool, ServerName: host, MinVersion: tls.VersionTLS12}}
	t.Cleanup(toOrigin.CloseIdleConnections)
	edge := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "https", Host: originAddr})
			pr.Out.Host = host
			// Set, not added: a viewer's own header of that name is replaced.
			pr.Out.Header.Set(relay.OriginSecretHeader, secret)
		},
		Transport: toOrigin,
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	serve(t, edgeTLS, edge, ca.leaf(t, host))
	serve(t, plain, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://"+host+r.URL.RequestURI(), http.StatusMovedPermanently)
	}), tls.Certificate{})

	// D008 passes on a 403 from the origin. That 403 must be the lock's and
	// not something else's: with the secret, the same request reaches the
	// relay and gets its ordinary answer.
	direct := &http.Client{Transport: toOrigin, Timeout: 10 * time.Second}
	for _, tt := range []struct {
		secret string
		status int
		body   string
	}{
		{"", 403, `{"error":"forbidden","message":"this relay answers only through its edge"}`},
		{secret, 404, `{"error":"not-found"}`},
	} {
		req, _ := http.NewRequest(http.MethodGet, "https://"+originAddr+"/readyz", nil)
		req.Host = host
		if tt.secret != "" {
			req.Header.Set(relay.OriginSecretHeader, tt.secret)
		}
		resp, err := direct.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status || string(body) != tt.body {
			t.Fatalf("origin /readyz (secret sent: %v): %d %s, want %d %s", tt.secret != "", resp.StatusCode, body, tt.status, tt.body)
		}
	}

	hook, err := filepath.Abs(filepath.Join("testdata", "resolve-host.cjs"))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(runCtx, node,
		filepath.Join(modules, "@byollm", "conformance", "dist", "audit-cli.js"),
		"https://"+host, "/byollm", originAddr)
	cmd.Env = append(os.Environ(),
		// Quoted: node splits NODE_OPTIONS on spaces outside double quotes.
		"NODE_OPTIONS="+strings.TrimSpace(os.Getenv("NODE_OPTIONS")+` --require "`+hook+`"`),
		"NODE_EXTRA_CA_CERTS="+caFile,
		"BYORELAY_AUDIT_HOST="+host,
		"BYORELAY_AUDIT_ADDRESS="+edgeAddr,
	)
	began := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("byollm-audit-deployment https://%s /byollm %s (%s):\n%s", host, originAddr, time.Since(began).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("the audit did not pass: %v", err)
	}
	report := string(out)
	for _, id := range checks {
		if !strings.Contains(report, "  ok    "+id+"\n") {
			t.Errorf("%s did not pass", id)
		}
	}
	if !strings.Contains(report, "11/11 — a stranger got nowhere.") {
		t.Errorf("the audit's verdict is not 11/11")
	}
}

// listen binds addr. Ports 80 and 443 need root (or CAP_NET_BIND_SERVICE):
// where that is missing the test skips, saying so, except under CI, where
// a skipped audit would read as a passed one. An address in use is waited
// for briefly (another run of this test on a shared machine), then fails.
func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ln, err := net.Listen("tcp", addr)
		switch {
		case err == nil:
			t.Cleanup(func() { ln.Close() })
			return ln
		case errors.Is(err, syscall.EADDRINUSE) && time.Now().Before(deadline):
			time.Sleep(250 * time.Millisecond)
		case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EADDRNOTAVAIL):
			if os.Getenv("CI") != "" {
				t.Fatalf("the deployment audit cannot run under CI: binding %s: %v", addr, err)
			}
			t.Skipf("deployment audit skipped: binding %s is not possible here (%v); it needs ports 80 and 443 on 127.0.0.1 and 127.0.0.2, which only root or CAP_NET_BIND_SERVICE may bind", addr, err)
		default:
			t.Fatalf("binding %s: %v", addr, err)
		}
	}
}

// serve answers on ln until the test ends, over TLS when cert is set.
func serve(t *testing.T, ln net.Listener, h http.Handler, cert tls.Certificate) {
	t.Helper()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	if cert.Certificate != nil {
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		ln = tls.NewListener(ln, srv.TLSConfig)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
}

// testCA is a certificate authority made for one test run.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	pool *x509.CertPool
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: "byorelay audit test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(400 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// leaf is a server certificate naming name, with a year of life: D010 asks
// for more than ninety days.
func (ca *testCA) leaf(t *testing.T, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func serial(t *testing.T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func randomHex(t *testing.T) string {
	t.Helper()
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}
