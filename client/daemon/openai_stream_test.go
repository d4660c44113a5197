package daemon_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/daemon"
)

// The streaming call asks for stream: true and hands over each content
// delta as its event arrives, before the server has finished.
func TestOpenAIBackendStreamsDeltasAsTheServerSendsThem(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Stream bool `json:"stream"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		if !req.Stream || r.Header.Get("Accept") != "text/event-stream" {
			t.Errorf("stream %v, accept %q", req.Stream, r.Header.Get("Accept"))
		}
		w.Header().Set("Content-Type", "text/event-stream")
		flush := w.(http.Flusher).Flush
		_, _ = w.Write([]byte("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n"))
		_, _ = w.Write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n"))
		flush()
		<-release // the rest only once the test saw the first delta
		_, _ = w.Write([]byte(": keep-alive\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"lo 😀\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"))
	}))
	defer srv.Close()

	var deltas []string
	b := daemon.OpenAIBackend{BaseURL: srv.URL + "/v1", Model: "m"}
	answer, err := b.RunStream(context.Background(), "hi", func(d string) {
		deltas = append(deltas, d)
		if len(deltas) == 1 {
			close(release)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if answer.Text != "Hello 😀" || answer.Stop != "end" || len(deltas) != 2 || deltas[0] != "Hel" {
		t.Fatalf("answer %+v, deltas %q", answer, deltas)
	}
}

func TestOpenAIStreamWithoutDoneDoesNotClaimCompletion(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"cut\"}}]}\n\n"))
	}))
	defer srv.Close()
	answer, err := daemon.OpenAIBackend{BaseURL: srv.URL + "/v1", Model: "m"}.RunStream(context.Background(), "hi", func(string) {})
	if err != nil || answer.Text != "cut" || answer.Stop != "unknown" {
		t.Fatalf("answer %+v, err %v", answer, err)
	}
}

func TestEchoBackendDripsAWordAtATime(t *testing.T) {
	var deltas []string
	answer, err := daemon.EchoBackend{Drip: time.Millisecond}.RunStream(context.Background(), "a b c", func(d string) { deltas = append(deltas, d) })
	if err != nil || answer.Text != "echo: a b c" {
		t.Fatalf("answer %+v, err %v", answer, err)
	}
	joined := ""
	for _, d := range deltas {
		joined += d
	}
	if joined != answer.Text || len(deltas) != 4 {
		t.Fatalf("deltas %q", deltas)
	}
}
