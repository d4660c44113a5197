package apiserver_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/repo"
)

// The real `byollm` daemon (npm byollm 0.1.1) pairs through the local API
// server by the device-code flow: pair start, polls while pending, approval
// through the control plane, then a poll that hands it the site keys to
// pin. The daemon is unchanged; only the relay is ours.
func TestARealByollmDaemonPairsThroughTheLocalServer(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "localtest", "js", "node_modules", ".bin", "byollm")
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("BYORELAY_ALLOW_SKIP") == "1" && os.Getenv("CI") == "" {
			t.Skipf("byollm not installed (skipping because BYORELAY_ALLOW_SKIP=1): %v", err)
		}
		t.Fatalf("byollm not installed (cd localtest/js && npm ci): %v", err)
	}
	st := startStack(t)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "connect", st.baseURL)
	cmd.Env = append(os.Environ(), "BYOLLM_HOME="+t.TempDir(), "NO_COLOR=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	codeLine := regexp.MustCompile(`Enter code:\s+([0-9A-HJKMNP-TV-Z]{4}-[0-9A-HJKMNP-TV-Z]{4})`)
	var transcript strings.Builder
	lines := bufio.NewScanner(out)
	approved := false
	var fingerprint string
	for lines.Scan() {
		transcript.WriteString(lines.Text() + "\n")
		if m := codeLine.FindStringSubmatch(lines.Text()); m != nil && !approved {
			pending, err := st.admin.PendingPairing(ctx, m[1])
			if err != nil {
				t.Fatalf("the code the daemon shows is not pending at the relay: %v\n%s", err, transcript.String())
			}
			if _, _, err := st.admin.ApprovePairing(ctx, m[1], st.demo.Daemon.Owner, ""); err != nil {
				t.Fatal(err)
			}
			approved, fingerprint = true, pending.Fingerprint
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("byollm connect: %v\n%s", err, transcript.String())
	}
	if !approved {
		t.Fatalf("the daemon never showed a code:\n%s", transcript.String())
	}
	// The key the relay holds for the code is the one the daemon showed
	// its person to check.
	if !strings.Contains(transcript.String(), fingerprint) {
		t.Fatalf("the relay's pending key %s is not the one the daemon showed:\n%s", fingerprint, transcript.String())
	}
	if !strings.Contains(transcript.String(), "paired as "+st.demo.Daemon.Owner) ||
		!strings.Contains(transcript.String(), "pinned: "+st.demo.Site.KeyID()) {
		t.Fatalf("the daemon did not pair and pin the demo site:\n%s", transcript.String())
	}
}
