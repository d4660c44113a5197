package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/controlplane/grants"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/fakekms"
	"github.com/byorelay/byorelay/protocol"
)

// `serve --grant-kms-key` hands devices the KMS key's public half (the
// KMS stand-in, found through AWS_ENDPOINT_URL_KMS as a person would point
// the SDK at one), names the key in its banner, and refuses to start with
// a key devices could not verify, or with --grants too.
func TestServeHandsDevicesTheKMSGrantKey(t *testing.T) {
	fake := fakekms.Start(t, fakekms.Options{})
	localtest.LambdaEnv(t, map[string]string{"kms": fake.URL})
	seed, err := grants.NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	want, err := grants.NewSeedSigner(seed)
	if err != nil {
		t.Fatal(err)
	}
	keyID := fake.AddKey(t, seed)

	if _, err := parseServeFlags([]string{"--grants", "--grant-kms-key", keyID}, io.Discard); err == nil {
		t.Fatal("serve took --grants and --grant-kms-key: two keys")
	}
	opts := testServeOptions(t)
	opts.store = storeMemory
	opts.grantKMSKey = fake.AddP256Key(t)
	if _, err := startLocal(context.Background(), opts, slog.New(slog.DiscardHandler), io.Discard); err == nil || !strings.Contains(err.Error(), "ECC_NIST_P256") {
		t.Fatalf("a P-256 key: %v, want serve refusing it", err)
	}

	opts.grantKMSKey = keyID
	ls, err := startLocal(context.Background(), opts, slog.New(slog.DiscardHandler), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.close)
	var banner bytes.Buffer
	ls.printBanner(&banner)
	if !strings.Contains(banner.String(), "relayed (grant) mode") || !strings.Contains(banner.String(), "KMS "+fakekms.ARN(keyID)) {
		t.Errorf("the banner does not name the KMS key:\n%s", banner.String())
	}

	device, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	pair := func(body any) []byte {
		t.Helper()
		b, err := protocol.Encode(body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Post(ls.url+"/byollm/pair", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("pair: %d %s", resp.StatusCode, out)
		}
		return out
	}
	var started protocol.PairStartResponse
	if err := json.Unmarshal(pair(protocol.PairStartRequest{ProtocolVersion: protocol.ProtocolVersion, Action: "start",
		Daemon: protocol.DaemonInfo{Version: "0.1.1", Label: "kms serve test", Platform: "linux"},
		Device: device.Public(), Capabilities: []protocol.Capability{}}), &started); err != nil {
		t.Fatal(err)
	}
	admin := controlplane.NewClient(ls.url, nil).WithToken(ls.adminToken)
	if _, err := admin.Approve(context.Background(), controlplane.ApproveRequest{UserCode: started.UserCode, Owner: "alice"}); err != nil {
		t.Fatalf("approve: %v", err)
	}
	var polled struct{ Status, ControlPlanePublic string }
	if err := json.Unmarshal(pair(protocol.PairPollRequest{ProtocolVersion: protocol.ProtocolVersion, Action: "poll", DeviceCode: started.DeviceCode}), &polled); err != nil {
		t.Fatal(err)
	}
	if polled.Status != protocol.PairApproved || polled.ControlPlanePublic != want.Public() {
		t.Fatalf("poll: %+v, want approved with the KMS key's %q", polled, want.Public())
	}
}
