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

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/repo"
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
func TestTheConsoleApprovesADaemonsPairingInChromium(t *testing.T) {
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
	f, err := admin.Export(ctx)
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

// pollTrue waits until expression is true in the page. A poll begun just
// as a navigation replaces the document fails with Chromium's "Cannot
// find context with specified id" (the context it evaluated in is gone);
// that says nothing about the page, so the poll starts again in the new
// document, within the same overall limit.
func pollTrue(expression string) chromedp.Action[chromedp.Void] {
	const limit = 25 * time.Second
	return func(ctx context.Context, target *chromedp.Target) (chromedp.Void, error) {
		deadline := time.Now().Add(limit)
		for {
			poll := chromedp.Poll[chromedp.Void](expression, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(time.Until(deadline)))
			v, err := poll(ctx, target)
			if err == nil || !strings.Contains(err.Error(), "Cannot find context with specified id") || time.Until(deadline) < time.Second {
				return v, err
			}
			select {
			case <-ctx.Done():
				return v, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
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
	root, err := repo.Root()
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

// The console's states, in a real headless Chromium. Opened as a daemon's
// verification URL (no token: a daemon's output must never carry the
// admin token), the page says once, above everything, that it needs the
// token and where to find it, with one input, and shows no table.
// Opened from the banner's link (#token=), it says "loading…" in every
// table until the admin API answers (the test holds the page's requests
// back to see it), then "token accepted" and the data. A token from an
// earlier run is refused, and the page says so in that one place.
//
// Screenshots: console-needs-token.png, console-loading.png,
// console-ready.png, console-refused.png in .cache/test-artifacts/.
func TestTheConsoleAsksForTheTokenOnceAndSaysLoading(t *testing.T) {
	browser := localtest.Browser(t)
	opts := testServeOptions(t)
	opts.store = storeMemory
	ls, err := startLocal(context.Background(), opts, slog.New(slog.DiscardHandler), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.close)
	pageText := `document.body.innerText`
	visible := func(id string) string {
		return `(document.getElementById("` + id + `").offsetParent !== null)`
	}

	// 1. The URL the daemon prints, in a browser that never saw a token.
	step(t, browser, "open the verification URL", chromedp.Steps(
		chromedp.Navigate(ls.verificationURL()),
		pollTrue(`document.body.dataset.state === "needs-token"`),
	))
	needs, err := chromedp.Run(browser, chromedp.Evaluate[map[string]any](`({
		help: document.getElementById("auth-help").innerText,
		helpShown: `+visible("auth-help")+`,
		consoleShown: `+visible("console")+`,
		inputs: Array.from(document.querySelectorAll("input")).filter((i) => i.offsetParent !== null).map((i) => i.id),
		text: `+pageText+`,
	})`))
	if err != nil {
		t.Fatal(err)
	}
	help, _ := needs["help"].(string)
	if needs["helpShown"] != true || needs["consoleShown"] != false {
		t.Fatalf("without a token the help shows %v and the tables %v; want only the help", needs["helpShown"], needs["consoleShown"])
	}
	for _, where := range []string{"make run", "admin console", ".cache/demo/stack.env", "BYORELAY_ADMIN_TOKEN"} {
		if !strings.Contains(help, where) {
			t.Errorf("the token help does not say %q: %q", where, help)
		}
	}
	if inputs, _ := needs["inputs"].([]any); len(inputs) != 1 || inputs[0] != "token" {
		t.Errorf("without a token the page offers the inputs %v, want the token's alone", inputs)
	}
	text, _ := needs["text"].(string)
	// The tables are not shown, so none of them says anything about the
	// token or claims to be loading.
	if strings.Contains(text, "enter the admin token") || strings.Contains(text, "loading") {
		t.Errorf("without a token the page says:\n%s", text)
	}
	saveScreenshot(t, browser, "console-needs-token.png")

	// 2. The banner's link, with the page's requests held back until the
	// test lets them go: the page must say loading, not ask for a token.
	gate, err := chromedp.Call(browser, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `(() => {
		const real = window.fetch.bind(window);
		let open;
		const held = new Promise((resolve) => { open = resolve; });
		window.openHeldRequests = open;
		window.fetch = (...args) => held.then(() => real(...args));
	})();`})
	if err != nil {
		t.Fatal(err)
	}
	step(t, browser, "open the banner's console link", chromedp.Steps(
		chromedp.Navigate("about:blank"), // a new document, which the held fetch is installed in
		chromedp.Navigate(ls.url+controlplane.ConsolePath+"#token="+ls.adminToken),
		pollTrue(`document.body.dataset.state === "loading"`),
	))
	loading, err := chromedp.Run(browser, chromedp.Evaluate[map[string]any](`({
		tables: ["pending", "devices", "consents"].map((id) => document.getElementById(id).innerText.trim()),
		helpShown: `+visible("auth-help")+`,
		consoleShown: `+visible("console")+`,
		status: document.getElementById("auth-status").textContent,
		address: location.href,
		text: `+pageText+`,
	})`))
	if err != nil {
		t.Fatal(err)
	}
	if tables, _ := loading["tables"].([]any); len(tables) != 3 || tables[0] != "loading…" || tables[1] != "loading…" || tables[2] != "loading…" {
		t.Errorf("while the answers are held the tables say %q, want loading… in each", tables)
	}
	if loading["helpShown"] != false || loading["consoleShown"] != true {
		t.Errorf("while loading the help shows %v and the tables %v", loading["helpShown"], loading["consoleShown"])
	}
	if text, _ := loading["text"].(string); strings.Contains(text, "enter the admin token") || strings.Contains(text, "refused") {
		t.Errorf("while loading the page says:\n%s", text)
	}
	if address, _ := loading["address"].(string); strings.Contains(address, "token=") {
		t.Errorf("the token stays in the address bar: %s", address)
	}
	saveScreenshot(t, browser, "console-loading.png")
	step(t, browser, "let the answers through", chromedp.Steps(
		chromedp.Evaluate[chromedp.Void](`window.openHeldRequests()`),
		pollTrue(`document.body.dataset.state === "ready" && document.getElementById("auth-status").textContent === "token accepted"`),
		pollTrue(`document.getElementById("pending").innerText.includes("no device is asking to pair")`),
		pollTrue(`document.getElementById("devices").innerText.includes(`+jsString(demo.RunnerID)+`)`),
		pollTrue(`document.getElementById("consents").innerText.includes(`+jsString(demo.SiteID)+`)`),
	))
	saveScreenshot(t, browser, "console-ready.png")
	if _, err := chromedp.Call(browser, page.RemoveScriptToEvaluateOnNewDocument, page.RemoveScriptToEvaluateOnNewDocumentParams(gate)); err != nil {
		t.Fatal(err)
	}

	// 3. The browser keeps a token from an earlier run: refused, said in
	// the one place, and the tables go away.
	step(t, browser, "open it with a stale token", chromedp.Steps(
		chromedp.Evaluate[chromedp.Void](`localStorage.setItem("byorelay-admin-token", "a-token-from-an-earlier-run")`),
		chromedp.Navigate(ls.verificationURL()),
		pollTrue(`document.body.dataset.state === "refused"`),
	))
	refused, err := chromedp.Run(browser, chromedp.Evaluate[map[string]any](`({
		status: document.getElementById("auth-status").textContent,
		helpShown: `+visible("auth-help")+`,
		consoleShown: `+visible("console")+`,
	})`))
	if err != nil {
		t.Fatal(err)
	}
	if status, _ := refused["status"].(string); !strings.HasPrefix(status, "the token was refused") || refused["helpShown"] != true || refused["consoleShown"] != false {
		t.Errorf("a stale token: status %q, help shown %v, tables shown %v", refused["status"], refused["helpShown"], refused["consoleShown"])
	}
	saveScreenshot(t, browser, "console-refused.png")
	// The banner's link opened in this same tab changes only the fragment
	// (no new document): the page takes the token from it and gets in.
	step(t, browser, "open the banner's link in the same tab", chromedp.Steps(
		chromedp.Evaluate[chromedp.Void](`location.hash = "token=`+ls.adminToken+`"`),
		pollTrue(`document.body.dataset.state === "ready" && !location.href.includes("token=")`),
		pollTrue(`document.getElementById("devices").innerText.includes(`+jsString(demo.RunnerID)+`)`),
	))
}
