package relaytest

import (
	"io"
	"net/http"

	"github.com/byorelay/byorelay/relay"
)

// Handler serves r straight over net/http, as the Lambda adapter serves it
// over API Gateway events: for tests that want a real relay on a loopback
// URL without the functions' wiring in front of it.
func Handler(r *relay.Relay) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp := r.Handle(req.Context(), relay.Request{
			Method: req.Method, Path: req.URL.Path, RawQuery: req.URL.RawQuery, Header: req.Header, Body: body,
		})
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.Status)
		_, _ = w.Write(resp.Body)
	})
}
