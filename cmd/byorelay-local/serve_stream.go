package main

import (
	"net/http"
	"strings"

	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/stream/seal"
)

// withStreams serves the stream lane's SSE attach straight from the relay,
// streaming, as the Lambda function URL in RESPONSE_STREAM mode does when
// deployed; everything else (the long-poll attach and the append
// included) goes through the API Gateway stand-in, buffered, as deployed.
func withStreams(r *relay.Relay, gateway http.Handler) http.Handler {
	sse := r.HTTPHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, hr *http.Request) {
		if hr.URL.Path == seal.StreamAttachPath && strings.Contains(hr.Header.Get("Accept"), "text/event-stream") {
			sse.ServeHTTP(w, hr)
			return
		}
		gateway.ServeHTTP(w, hr)
	})
}
