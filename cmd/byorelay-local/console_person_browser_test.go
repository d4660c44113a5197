package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/demo"
	"github.com/byorelay/byorelay/protocol"
)

// With grants on, the console's person view, in a real headless Chromium,
// shows a job that waits on a slot nobody mapped. The demo device
// heartbeats (advertising the demo service for llm.generate), the demo
// site publishes a job for the demo owner while the slot is mapped (with
// grants on the enqueue refuses an unmapped one), and the operator unmaps
// the slot with the person view's Unmap button. The view then lists the
// job as waiting on (default, llm.generate) and names the demo device's
// service as what could answer it. The device's next claim gets nothing:
// the relay declines the job unmapped, as the stack's log counts, and
// keeps it queued. Mapping the service again with its Map button empties
// the waiting list.
//
// Screenshot: console-person-waiting.png in .cache/test-artifacts/.
func TestTheConsoleShowsAJobWaitingOnAnUnmappedSlot(t *testing.T) {
	browser := localtest.Browser(t)
	opts := testServeOptions(t)
	opts.store = storeMemory
	opts.grants = true
	var logged lockedBuffer // the stack's log, where it counts grant declines by reason
	ls, err := startLocal(context.Background(), opts, slog.New(slog.NewTextHandler(&logged, nil)), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The demo device, live: one heartbeat says what it advertises.
	dev, err := daemon.New(daemon.Config{
		RelayURL: ls.url, Keys: ls.demo.Daemon, Backend: daemon.EchoBackend{}, Service: demo.Service,
		Kinds:   []string{protocol.KindGenerate},
		Pairing: daemon.Pairing{RunnerID: demo.RunnerID, Owner: demo.Owner},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dev.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	shop, err := site.New(site.Config{RelayURL: ls.url, SiteID: demo.SiteID, Keys: ls.demo.Site})
	if err != nil {
		t.Fatal(err)
	}
	jobID := "job-waiting-" + time.Now().Format("150405.000")
	stub := protocol.JobStub{ID: jobID, Kind: protocol.KindGenerate, Owner: demo.Owner, Audience: protocol.AudiencePrivate,
		DeadlineAt: time.Now().Add(5 * time.Minute).UnixMilli()}
	if state, err := shop.Publish(ctx, stub, protocol.GeneratePayload("wait for a mapping")); err != nil || state != "queued" {
		t.Fatalf("publish while mapped: state %q, %v", state, err)
	}

	// The operator opens the demo owner's view and unmaps the slot there.
	mappingRow := `Array.from(document.querySelectorAll("#person-mappings tr")).find((r) => r.cells.length === 6 && r.cells[2].textContent === "llm.generate")`
	step(t, browser, "open the person view", chromedp.Steps(
		chromedp.Navigate(ls.url+controlplane.ConsolePath+"#token="+ls.adminToken),
		pollTrue(`document.body.dataset.state === "ready"`),
		chromedp.SetValue(chromedp.ID("person"), demo.Owner),
		chromedp.Click(chromedp.CSS(`#person-form button[type="submit"]`)),
		pollTrue(`document.getElementById("person-view").offsetParent !== null`),
		pollTrue(mappingRow+` !== undefined`),
		pollTrue(`document.getElementById("person-waiting").innerText.trim() === "none"`),
	))
	step(t, browser, "unmap llm.generate", chromedp.Steps(
		chromedp.Evaluate[chromedp.Void](mappingRow+`.querySelector("button").click()`),
		pollTrue(`document.getElementById("person-status").textContent === "unmapped default / llm.generate"`),
	))
	waitingRows := `Array.from(document.querySelectorAll("#person-waiting tr"), (r) => Array.from(r.cells, (c) => c.textContent))`
	rows, err := chromedp.Run(browser, chromedp.Evaluate[[][]string](waitingRows))
	if err != nil {
		t.Fatal(err)
	}
	// site, job, purpose, kind, could answer it
	want := []string{demo.SiteID, jobID, "default", protocol.KindGenerate, demo.Service + " of " + demo.Owner}
	if len(rows) != 1 || len(rows[0]) != len(want) {
		t.Fatalf("the waiting list shows %q, want one row %q", rows, want)
	}
	for i := range want {
		if rows[0][i] != want[i] {
			t.Fatalf("the waiting list shows %q, want %q", rows[0], want)
		}
	}
	saveScreenshot(t, browser, "console-person-waiting.png")

	// The device's claim gets nothing: the job is declined unmapped and
	// stays queued, still listed.
	if claimed, err := dev.Tick(ctx); err != nil || claimed != 0 {
		t.Fatalf("the device claimed %d jobs (%v) of an unmapped slot", claimed, err)
	}
	if log := logged.String(); !strings.Contains(log, `msg="grant declines" reason=unmapped permanent=false count=1`) {
		t.Fatalf("the claim was not declined unmapped; the stack logged:\n%s", log)
	}
	view, err := controlplane.NewClient(ls.url, nil).WithToken(ls.adminToken).Person(ctx, demo.Owner)
	if err != nil {
		t.Fatal(err)
	}
	if len(view.Sites) != 1 || len(view.Sites[0].Waiting) != 1 || view.Sites[0].Waiting[0].JobID != jobID {
		t.Fatalf("after the declined claim the admin view is %+v, want %s still waiting", view, jobID)
	}

	// Mapped again from the services table: nothing waits.
	serviceRow := `Array.from(document.querySelectorAll("#person-services tr")).find((r) => r.cells.length === 7 && r.cells[1].textContent === "llm.generate")`
	step(t, browser, "map it again", chromedp.Steps(
		chromedp.Evaluate[chromedp.Void](`document.getElementById("person-site").value = `+jsString(demo.SiteID)),
		chromedp.Evaluate[chromedp.Void](serviceRow+`.querySelector("button").click()`),
		pollTrue(`document.getElementById("person-status").textContent === "mapped default / llm.generate to `+demo.Service+` of `+demo.Owner+`"`),
		pollTrue(`document.getElementById("person-waiting").innerText.trim() === "none"`),
	))
}

// lockedBuffer is a log the stack writes from its handlers' goroutines
// while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
