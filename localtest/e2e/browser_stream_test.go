package e2e_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/streamdemo"
)

// The demo page in a real headless Chromium: a prompt goes to the echo
// backend through byorelay on DynamoDB Local, and the answer's text grows
// over several DOM reads before the page shows the seal.
func TestTheStreamPageShowsTheAnswerGrowingInABrowser(t *testing.T) {
	browser := localtest.Browser(t)
	st := startStack(t, leaseMs)
	st.streams = true
	shop := st.newSite("shop-page")
	st.consent("alice", "shop-page")
	dev := st.pair("alice", "alice-page", daemon.EchoBackend{Drip: 250 * time.Millisecond})
	ctx, stop := context.WithCancel(st.ctx)
	defer stop()
	go func() { _ = dev.Run(ctx) }()
	startPumps(ctx, t, newCollector(), shop)
	page := httptest.NewServer(streamdemo.Handler(shop, "alice"))
	defer page.Close()

	prompt := "one two three four five six seven eight nine ten"
	want := "echo: " + prompt
	browser, cancel := context.WithTimeout(browser, 60*time.Second)
	defer cancel()
	// The page records every form its answer takes, as it takes it: read
	// from here by polling instead, a loaded machine's slow DOM reads
	// would miss the forms between them and see too few.
	const watch = `window.answerForms = [];
new MutationObserver(() => {
  const text = document.getElementById('answer').textContent, forms = window.answerForms;
  if (text !== '' && forms[forms.length - 1] !== text) forms.push(text);
}).observe(document.getElementById('answer'), {childList: true, characterData: true, subtree: true});
true`
	if _, err := chromedp.Run(browser, chromedp.Steps(
		chromedp.Navigate(page.URL),
		chromedp.WaitVisible(chromedp.ID("prompt")),
	)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(browser, chromedp.Evaluate[bool](watch)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(browser, chromedp.Steps(
		chromedp.SetValue(chromedp.ID("prompt"), prompt),
		chromedp.Click(chromedp.ID("go")),
	)); err != nil {
		t.Fatal(err)
	}
	var status string
	for deadline := time.Now().Add(45 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var err error
		if status, err = chromedp.Run(browser, chromedp.TextContent(chromedp.ID("status"))); err != nil {
			t.Fatal(err)
		}
		// Only a final status ends the wait: right after the click the
		// page may still say idle.
		if status == "done" || status == "stale" || status == "absent" || strings.HasPrefix(status, "failed") {
			break
		}
	}
	reads, err := chromedp.Run(browser, chromedp.Evaluate[[]string](`window.answerForms`))
	if err != nil {
		t.Fatal(err)
	}
	if status != "done" {
		t.Fatalf("page status %q after reads %q", status, reads)
	}
	if len(reads) < 3 {
		t.Fatalf("the answer took %d distinct forms before the seal: %q", len(reads), reads)
	}
	for i := 1; i < len(reads); i++ {
		if !strings.HasPrefix(reads[i], reads[i-1]) || len(reads[i]) <= len(reads[i-1]) {
			t.Fatalf("read %d %q does not grow from %q", i, reads[i], reads[i-1])
		}
	}
	if got := strings.TrimSpace(reads[len(reads)-1]); got != want {
		t.Fatalf("final text %q, want %q", got, want)
	}
	t.Logf("the answer took %d forms on the page before the seal", len(reads))
}
