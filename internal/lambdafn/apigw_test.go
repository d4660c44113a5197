package lambdafn

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/byorelay/byorelay/internal/platform/container"
	"github.com/byorelay/byorelay/internal/relay"
)

func TestServeHTTPRunsANetHTTPHandlerOnARelayRequest(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /admin/rosters/{id}", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(202)
		_, _ = io.WriteString(w, r.PathValue("id")+"|"+r.URL.Query().Get("q")+"|"+string(b)+"|"+r.Header.Get("X-Amz-Date"))
	})
	resp := serveHTTP(context.Background(), mux, relay.Request{
		Method: "PUT", Path: "/admin/rosters/team%201", RawQuery: "q=v",
		Header: http.Header{"X-Amz-Date": {"20261129T000000Z"}}, Body: []byte("members"),
	})
	if resp.Status != 202 || string(resp.Body) != "team 1|v|members|20261129T000000Z" {
		t.Fatalf("answer = %d %q", resp.Status, resp.Body)
	}
}

// An event API Gateway could not have produced is answered like a body the
// relay cannot read, not by failing the invocation (which API Gateway
// would turn into a bare 500 and the alarms into a page).
func TestAnUndecodableEventIsABadRequestNotAFailure(t *testing.T) {
	// No relay behind it: the event is refused before one is asked.
	st := &Stack{log: slogDiscard(), relay: container.Built[*relay.Relay](nil)}
	ev := events.APIGatewayV2HTTPRequest{RawPath: "/byollm/claim", Body: "%%%", IsBase64Encoded: true}
	ev.RequestContext.HTTP.Method = http.MethodPost
	resp, err := st.relayHandler(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 400 || resp.Body != `{"error":"bad-request"}` || resp.Headers["content-type"] != "application/json" {
		t.Fatalf("answer = %+v", resp)
	}
}
