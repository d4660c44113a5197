package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/byorelay/byorelay/localtest"
)

// The page itself, in a real headless Chromium: a person types a prompt,
// and the job's card moves through its states to the daemon's answer,
// carried by the event stream (not the polling fallback).
func TestThePageShowsTheAnswerInChromium(t *testing.T) {
	browser := localtest.Browser(t)
	origin := startDirect(t, "alice")
	ctx, cancel := context.WithTimeout(browser, 60*time.Second)
	defer cancel()

	done := chromedp.CSS(`.job[data-state="ok"]`)
	_, err := chromedp.Run(ctx, chromedp.Steps(
		chromedp.Navigate(origin+"/"),
		chromedp.WaitVisible(chromedp.ID("pairing")),
		chromedp.SetValue(chromedp.ID("prompt"), "hello from a browser"),
		chromedp.Click(chromedp.ID("ask")),
		chromedp.WaitVisible(done),
	))
	if err != nil {
		t.Fatal(err)
	}
	owner, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("owner")))
	if err != nil {
		t.Fatal(err)
	}
	answer, err := chromedp.Run(ctx, chromedp.Text(done+" .answer"))
	if err != nil {
		t.Fatal(err)
	}
	if owner != "alice" || answer != "echo: hello from a browser" {
		t.Fatalf("the page shows owner %q and answer %q", owner, answer)
	}
	polled, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('.job').dataset.via === "poll"`))
	if err != nil {
		t.Fatal(err)
	}
	if polled {
		t.Fatal("the page fell back to polling: the event stream did not carry the job")
	}
}

// Behind a proxy that refuses event streams, the page falls back to
// polling the job and still shows the answer.
func TestThePageFallsBackToPollingWhenTheStreamFails(t *testing.T) {
	browser := localtest.Browser(t)
	origin := startDirectBehind(t, "alice", func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/events") {
				http.Error(w, "no streams here", http.StatusBadGateway)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	ctx, cancel := context.WithTimeout(browser, 60*time.Second)
	defer cancel()

	done := chromedp.CSS(`.job[data-state="ok"][data-via="poll"]`)
	_, err := chromedp.Run(ctx, chromedp.Steps(
		chromedp.Navigate(origin+"/"),
		chromedp.WaitVisible(chromedp.ID("pairing")),
		chromedp.SetValue(chromedp.ID("prompt"), "hello without a stream"),
		chromedp.Click(chromedp.ID("ask")),
		chromedp.WaitVisible(done),
	))
	if err != nil {
		t.Fatal(err)
	}
	answer, err := chromedp.Run(ctx, chromedp.Text(done+" .answer"))
	if err != nil {
		t.Fatal(err)
	}
	if answer != "echo: hello without a stream" {
		t.Fatalf("the page shows %q", answer)
	}
}
