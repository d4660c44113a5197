package peers_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/peers"
	"github.com/byorelay/byorelay/protocol"
)

func TestMain(m *testing.M) { localtest.Main(m) }

// target is a relay a scenario runs against.
type target struct {
	name  string
	start func(t *testing.T) string
}

var (
	byorelay  = target{"byorelay", func(t *testing.T) string { return peers.StartByorelay(t).Origin }}
	reference = target{"reference relay", func(t *testing.T) string { return peers.StartReferenceRelay(t, false) }}
)

// withBaseline is byorelay, which is under test, and the reference relay,
// which proves the scenario itself (and the scripts) right: a scenario that
// fails on both is the test's fault, not byorelay's. The scenarios where
// both peers are real run both; those with a Go half run byorelay only,
// to keep the package short.
var withBaseline = []target{byorelay, reference}

const (
	owner  = peers.Owner
	siteID = peers.SiteID
)

// send makes a signed request against origin and returns status and body.
func send(t *testing.T, origin string, r relay.Request) (int, []byte) {
	t.Helper()
	url := origin + r.Path
	if r.RawQuery != "" {
		url += "?" + r.RawQuery
	}
	req, err := http.NewRequest(r.Method, url, bytes.NewReader(r.Body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", r.Method, r.Path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// call is send, requiring a 200 and decoding the answer into out.
func call(t *testing.T, origin string, r relay.Request, out any) {
	t.Helper()
	code, body := send(t, origin, r)
	if code != http.StatusOK {
		t.Fatalf("%s %s: %d %s", r.Method, r.Path, code, body)
	}
	// The protocol's own answers are decoded as strictly as the daemon's
	// zod schemas read them: an extra or missing key is a failure here too.
	var err error
	if v, ok := out.(protocol.Validator); ok {
		err = protocol.DecodeStrict(body, v)
	} else {
		err = json.Unmarshal(body, out)
	}
	if err != nil {
		t.Fatalf("%s %s: %s: %v", r.Method, r.Path, body, err)
	}
}

// eventually polls f every 20 ms until it reports done, for at most
// peers.StepTimeout.
func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(peers.StepTimeout)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", peers.StepTimeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sealedOutcome is the result leg's plaintext, {outcome, ran}.
type sealedOutcome struct {
	Outcome struct {
		Outcome string `json:"outcome"`
		Text    string `json:"text"`
	} `json:"outcome"`
	Ran struct {
		Model        string `json:"model"`
		BackendClass string `json:"backendClass"`
		DurationMs   int64  `json:"durationMs"`
		Stop         string `json:"stop,omitempty"`
		StopReported *bool  `json:"stopReported,omitempty"`
	} `json:"ran"`
}

func pv() string { return protocol.ProtocolVersion }
