package lambdafn

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/byorelay/byorelay/internal/controlplane/grants"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/demo"
	"github.com/byorelay/byorelay/localtest/fakekms"
	"github.com/byorelay/byorelay/protocol"
)

func TestLoadEnvReadsTheKMSGrantKey(t *testing.T) {
	e, err := LoadEnv(envOf(map[string]string{"TABLE_NAME": "t", "GRANT_KMS_KEY_ID": "arn:aws:kms:eu-west-1:000000000000:key/k"}))
	if err != nil || e.GrantKMSKeyID != "arn:aws:kms:eu-west-1:000000000000:key/k" || e.GrantKeyParameter != "" {
		t.Fatalf("env %+v, %v", e, err)
	}
}

// GRANT_KMS_KEY_ID through the deployed wiring, against the KMS stand-in
// (moto serves no Ed25519 keys): a container starts without calling KMS;
// its first request reads the key's public half, and a device approved
// after that is handed it. A key devices could not verify answers 503,
// logged, and reaches no relay.
func TestGrantKeyHeldInKMSIsReadOnFirstRequest(t *testing.T) {
	ctx := context.Background()
	ddb := localtest.DynamoEndpoint(t)
	fake := fakekms.Start(t, fakekms.Options{})
	localtest.LambdaEnv(t, map[string]string{"dynamodb": ddb, "kms": fake.URL})
	world, err := demo.Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	table := "grantkms-" + time.Now().Format("150405.000000")
	if err := world.Seed(ctx, dynamodb.NewFromConfig(localtest.AWSConfig(ddb)), table); err != nil {
		t.Fatal(err)
	}
	seed, err := grants.NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	want, err := grants.NewSeedSigner(seed)
	if err != nil {
		t.Fatal(err)
	}
	keyID := fake.AddKey(t, seed)

	var logs bytes.Buffer
	open := func(key string) func(body any) answer {
		t.Helper()
		env, err := LoadEnv(envOf(map[string]string{"TABLE_NAME": table, "GRANT_KMS_KEY_ID": key, "VERIFICATION_URL": "https://relay.example/approve"}))
		if err != nil {
			t.Fatal(err)
		}
		calls := fake.Calls()
		st, err := Open(env, Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil)), MetricsOut: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		if fake.Calls() != calls {
			t.Fatal("Open called KMS: a container's init must not wait on a round trip")
		}
		pair, err := st.Handler(Pair)
		if err != nil {
			t.Fatal(err)
		}
		return func(body any) answer {
			t.Helper()
			b, err := protocol.Encode(body)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := pair(ctx, eventOf(t, relay.Request{Method: http.MethodPost, Path: "/byollm/pair",
				Header: http.Header{"Content-Type": {"application/json"}}, Body: b}))
			if err != nil {
				t.Fatal(err)
			}
			return answer{resp.StatusCode, resp.Body}
		}
	}
	start := protocol.PairStartRequest{ProtocolVersion: protocol.ProtocolVersion, Action: "start",
		Daemon: protocol.DaemonInfo{Version: "0.1.1", Label: "kms grant key test", Platform: "linux"},
		Device: world.Daemon.Public(), Capabilities: []protocol.Capability{}}

	if got := open(fake.AddP256Key(t))(start); got.status != http.StatusServiceUnavailable || !strings.Contains(got.body, `"error":"server-error"`) {
		t.Fatalf("a P-256 key: %d %s, want 503 server-error", got.status, got.body)
	}
	if !strings.Contains(logs.String(), "ECC_NIST_P256") {
		t.Errorf("the log does not say why:\n%s", logs.String())
	}

	pair := open(fakekms.ARN(keyID))
	got := pair(start)
	var started protocol.PairStartResponse
	if got.status != http.StatusOK || json.Unmarshal([]byte(got.body), &started) != nil {
		t.Fatalf("start: %d %s", got.status, got.body)
	}
	got = pair(protocol.PairPollRequest{ProtocolVersion: protocol.ProtocolVersion, Action: "poll", DeviceCode: started.DeviceCode})
	var polled struct{ Status, ControlPlanePublic string }
	if got.status != http.StatusOK || json.Unmarshal([]byte(got.body), &polled) != nil || polled.Status != protocol.PairApproved {
		t.Fatalf("poll: %d %s, want approved", got.status, got.body)
	}
	if polled.ControlPlanePublic != want.Public() {
		t.Fatalf("the device was handed control-plane key %q, want the KMS key's %q", polled.ControlPlanePublic, want.Public())
	}
	if fake.Signs() != 0 {
		t.Fatalf("pairing asked KMS for %d signatures; it signs nothing", fake.Signs())
	}
}

// answer is a function's HTTP answer.
type answer struct {
	status int
	body   string
}
