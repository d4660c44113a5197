package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/byorelay/byorelay/controlplane"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/demo"
)

// A person pairs a real byollm daemon (npm byollm 0.1.1) with the local
// stack through the page the daemon tells them to open, in a real headless
// Chromium: `byollm connect` prints the console's URL, a code and its key
// fingerprint; the person opens that URL, gives the page the admin token,
// enters the code, sees the same fingerprint, approves it for the demo
// owner, and the daemon's poll turns approved. Before that, a hostile page
// on another origin in the same browser tries the two classic cross-site
// approvals (a text/plain form post whose body is valid JSON, and a
// no-cors fetch) and changes nothing.
//
// The console also lists the pending pairings: the first daemon's is
// listed when the page opens, and with the page open a second daemon
// starts pairing, appears in the list by itself (with its label, platform,
// version, capabilities, key id and time left), and is approved with one
// click on its row.
//
// Screenshots of the console showing the pending pairing and after
// approving are kept in .cache/test-artifacts/ (git-ignored):
// console-pending.png, console-approved.png, console-listed.png,
// console-list-approved.png (console-failed.png on failure).
func TestTheConsoleApprovesARealDaemonsPairingInChromium(t *testing.T) {
	_, modules := localtest.RequireNode(t, "byollm")
	bin := filepath.Join(modules, ".bin", "byollm")
	browser := localtest.Browser(t)

	ls, err := startLocal(context.Background(), testServeOptions(t), slog.New(slog.DiscardHandler), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.close)
	admin := controlplane.NewClient(ls.url, nil).WithToken(ls.adminToken)

	// The daemon, as a person runs it: its own home (HOME, not the
	// BYOLLM_HOME test seam, which it warns about).
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	daemon := startConnect(t, ctx, bin, ls.url)
	openURL := daemon.waitFor(t, regexp.MustCompile(`Open:\s+(\S+)`))
	code := daemon.waitFor(t, regexp.MustCompile(`Enter code:\s+([0-9A-HJKMNP-TV-Z]{4}-[0-9A-HJKMNP-TV-Z]{4})`))
	fingerprint := daemon.waitFor(t, regexp.MustCompile(`(BYOLLM(?:-[0-9A-Z]{4}){6})`))
	if openURL != ls.url+controlplane.ConsolePath {
		t.Fatalf("the daemon says to open %s, want the console %s", openURL, ls.url+controlplane.ConsolePath)
	}

	// A hostile page on another origin tries to approve the code for
	// mallory with what a browser lets any page send.
	hostile := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><title>hostile</title>
<form id="f" method="POST" action="%[1]s/admin/pairings/approve" enctype="text/plain">
<input name='{"userCode":"%[2]s","owner":"mallory","x":"' value='"}'></form>
<script>
fetch("%[1]s/admin/pairings/approve", {method: "POST", mode: "no-cors", credentials: "include",
  headers: {"Content-Type": "text/plain"}, body: JSON.stringify({userCode: "%[2]s", owner: "mallory"})})
  .catch(() => {}).finally(() => { document.title = "fetched"; document.getElementById("f").submit(); });
</script>`, ls.url, code)
	}))
	defer hostile.Close()
	step(t, browser, "the hostile page", chromedp.Navigate(hostile.URL))
	// The form post navigates away, to the admin API's refusal. Polled
	// from here: a poll inside the page dies with the page it polls.
	refusal := ""
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		at, err := chromedp.Run(browser, chromedp.Evaluate[string](`location.href + "\n" + (document.body ? document.body.innerText : "")`))
		if err == nil && strings.HasPrefix(at, ls.url) {
			refusal = at
			break
		}
	}
	if !strings.Contains(refusal, `"error":`) {
		t.Errorf("the cross-site form post was not refused by the admin API: %q", refusal)
	}
	if _, err := admin.Pairing(ctx, code); err != nil {
		t.Fatalf("after the hostile page the code is no longer pending: %v", err)
	}
	f, _, err := admin.Export(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Devices {
		if d.Owner == "mallory" {
			t.Fatalf("a cross-site request approved a device: %+v", d)
		}
	}

	// The person, at the URL the daemon printed.
	step(t, browser, "open the console", chromedp.Steps(
		chromedp.Navigate(openURL),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), ls.adminToken),
		chromedp.Click(chromedp.ID("save-token")),
		pollTrue(`document.getElementById("auth-status").textContent === "token accepted"`),
	))
	// The pending list shows the daemon's pairing without being asked.
	step(t, browser, "see the pairing listed", pollTrue(listedRow(code)+` !== null`))
	if listedKey, err := chromedp.Run(browser, chromedp.Evaluate[string](listedRow(code)+`.cells[5].textContent`)); err != nil || listedKey != fingerprint {
		t.Fatalf("the list shows key id %q (%v), the daemon printed %s", listedKey, err, fingerprint)
	}
	step(t, browser, "look up the code", chromedp.Steps(
		chromedp.SendKeys(chromedp.ID("code"), strings.ToLower(code)), // as typed, not as printed
		chromedp.Click(chromedp.ID("lookup")),
		chromedp.WaitVisible(chromedp.ID("pairing")),
	))
	shown := map[string]string{}
	for _, id := range []string{"p-code", "p-label", "p-platform", "p-fingerprint", "p-capabilities"} {
		text, err := chromedp.Run(browser, chromedp.Text(chromedp.ID(id)))
		if err != nil {
			t.Fatal(err)
		}
		shown[id] = text
	}
	if shown["p-code"] != code || shown["p-fingerprint"] != fingerprint || shown["p-label"] == "" || shown["p-platform"] == "" {
		t.Fatalf("the console shows %v; the daemon printed code %s and fingerprint %s", shown, code, fingerprint)
	}
	saveScreenshot(t, browser, "console-pending.png")
	step(t, browser, "approve", chromedp.Steps(
		chromedp.SetValue(chromedp.ID("owner"), demo.Owner),
		chromedp.Click(chromedp.ID("approve")),
		pollTrue(`document.getElementById("pairing-status").textContent.startsWith("approved")`),
		// The devices table now lists the new device with its key id.
		pollTrue(`document.getElementById("devices").textContent.includes(`+jsString(fingerprint)+`)`),
	))
	saveScreenshot(t, browser, "console-approved.png")

	// The daemon's poll turns approved, for the owner chosen on the page.
	if err := daemon.wait(); err != nil {
		t.Fatalf("byollm connect: %v\n%s", err, daemon.transcript())
	}
	if !strings.Contains(daemon.transcript(), "paired as "+demo.Owner) {
		t.Fatalf("the daemon did not pair as %s:\n%s", demo.Owner, daemon.transcript())
	}
	if strings.Contains(daemon.transcript(), "test seam") {
		t.Errorf("the daemon warned about its state directory:\n%s", daemon.transcript())
	}

	// Its poll spent the code: it leaves the list.
	step(t, browser, "see the paired code leave the list", pollTrue(listedRow(code)+` === null`))

	// With the page open, a second machine asks to pair; it appears in the
	// list by itself and one click approves it.
	second := startConnect(t, ctx, bin, ls.url)
	secondCode := second.waitFor(t, regexp.MustCompile(`Enter code:\s+([0-9A-HJKMNP-TV-Z]{4}-[0-9A-HJKMNP-TV-Z]{4})`))
	secondKey := second.waitFor(t, regexp.MustCompile(`(BYOLLM(?:-[0-9A-Z]{4}){6})`))
	step(t, browser, "see the second pairing appear", pollTrue(listedRow(secondCode)+` !== null`))
	row, err := chromedp.Run(browser, chromedp.Evaluate[[]string](`Array.from(`+listedRow(secondCode)+`.cells, (c) => c.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	// code, label, platform, daemon version, can run, key id, expires in
	if len(row) != 8 || row[0] != secondCode || row[1] == "" || row[2] == "" || !regexp.MustCompile(`^\d+\.\d+\.\d+`).MatchString(row[3]) ||
		row[4] == "" || row[5] != secondKey || !regexp.MustCompile(`^(9|10) min \d\d s$`).MatchString(row[6]) {
		t.Fatalf("the list shows %q; the daemon printed code %s and key %s", row, secondCode, secondKey)
	}
	saveScreenshot(t, browser, "console-listed.png")
	step(t, browser, "approve it with one click", chromedp.Steps(
		chromedp.SetValue(chromedp.ID("list-owner"), demo.Owner),
		chromedp.Click(chromedp.CSS(`#pending tr[data-code="`+secondCode+`"] button.approve`)),
		pollTrue(`document.getElementById("pending-status").textContent.startsWith("approved: `+secondCode+`")`),
		pollTrue(`document.getElementById("devices").textContent.includes(`+jsString(secondKey)+`)`),
	))
	saveScreenshot(t, browser, "console-list-approved.png")
	if err := second.wait(); err != nil {
		t.Fatalf("the second byollm connect: %v\n%s", err, second.transcript())
	}
	if !strings.Contains(second.transcript(), "paired as "+demo.Owner) {
		t.Fatalf("the second daemon did not pair as %s:\n%s", demo.Owner, second.transcript())
	}
	step(t, browser, "see it leave the list", pollTrue(listedRow(secondCode)+` === null`))
}

// listedRow is a JS expression for the pending list's row for a user code,
// or null.
func listedRow(code string) string {
	return `document.querySelector('#pending tr[data-code="` + code + `"]')`
}

// connectRun is a running `byollm connect` and what it printed.
type connectRun struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder
	done chan struct{}
}

func startConnect(t *testing.T, ctx context.Context, bin, relayURL string) *connectRun {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, "connect", relayURL)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BYOLLM_HOME=") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "HOME="+t.TempDir(), "NO_COLOR=1")
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &connectRun{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		lines := bufio.NewScanner(pipe)
		for lines.Scan() {
			c.mu.Lock()
			c.out.WriteString(lines.Text() + "\n")
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return c
}

func (c *connectRun) transcript() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// waitFor waits until the daemon has printed a match of re and returns
// its first group.
func (c *connectRun) waitFor(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(c.transcript()); m != nil {
			return m[1]
		}
		select {
		case <-c.done:
			if m := re.FindStringSubmatch(c.transcript()); m != nil {
				return m[1]
			}
			t.Fatalf("byollm connect ended without printing %v:\n%s", re, c.transcript())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("byollm connect never printed %v:\n%s", re, c.transcript())
	return ""
}

func (c *connectRun) wait() error {
	<-c.done
	return c.cmd.Wait()
}

// step runs browser actions with a bound, failing the test with the page's
// text when they do not finish.
func step(t *testing.T, browser context.Context, what string, a chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(browser, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, a); err != nil {
		text, _ := chromedp.Run(browser, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		saveScreenshot(t, browser, "console-failed.png")
		t.Fatalf("%s: %v\npage text:\n%s", what, err, text)
	}
}

func pollTrue(expression string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expression, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(25*time.Second))
}

func jsString(s string) string { return fmt.Sprintf("%q", s) }

// saveScreenshot keeps a full-page screenshot under the repository's
// git-ignored .cache/test-artifacts, where it outlives the test.
func saveScreenshot(t *testing.T, browser context.Context, name string) {
	t.Helper()
	// Quality 100 is a PNG; anything lower is a JPEG.
	png, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	root, err := localtest.RepoRoot()
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	dir := filepath.Join(root, ".cache", "test-artifacts")
	if err := os.MkdirAll(dir, 0o755); err == nil {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, png, 0o644); err == nil {
			t.Logf("screenshot: %s", path)
		}
	}
}
