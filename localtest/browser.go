package localtest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// chromiumPaths are where a headless-capable Chromium is looked for, in
// order: Debian's package (what .ci/run installs), then common names.
var chromiumPaths = []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"}

// Browser starts a real headless Chromium for a page test and returns a
// chromedp context for one tab; both end with the test. Each test gets a
// fresh profile in its temp dir, and the browser makes no traffic of its
// own (no component updates, sync or background networking), so the only
// requests are the test's, to loopback.
//
// No Chromium fails the test under CI and otherwise too, unless
// BYORELAY_ALLOW_SKIP=1 (and CI unset): a page test that silently skips
// proves nothing.
func Browser(t testing.TB) context.Context {
	t.Helper()
	exe, err := findChromium()
	if err != nil {
		if os.Getenv(envAllowSkip) == "1" && os.Getenv("CI") == "" {
			t.Skipf("no Chromium (skipping because %s=1): %v", envAllowSkip, err)
		}
		t.Fatalf("no Chromium for the page tests (Debian: apt-get install chromium; .ci/run installs it): %v", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1200, 1000),
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	// Start the browser now, so a broken install fails here and not inside
	// the first step of the test.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start Chromium (%s): %v", exe, err)
	}
	return ctx
}

func findChromium() (string, error) {
	for _, p := range chromiumPaths {
		if path, err := exec.LookPath(p); err == nil {
			return path, nil
		}
	}
	return "", errors.New("none of " + strings.Join(chromiumPaths, ", ") + " found")
}
