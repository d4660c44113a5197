package lambdafn

import (
	"bytes"
	"context"
	"net/http"
	"net/url"

	"github.com/aws/aws-lambda-go/events"

	"github.com/byorelay/byorelay/internal/platform/container"
	"github.com/byorelay/byorelay/internal/relay"
)

// adminHandler serves the control API's net/http handler behind an API
// Gateway route authorised by IAM.
func (st *Stack) adminHandler(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	st.Calibrate(ctx)
	req, err := fromAPIGateway(ev)
	if err != nil {
		return container.BadEvent(), nil
	}
	return toAPIGateway(serveHTTP(ctx, st.Admin(), req)), nil
}

// serveHTTP runs an http.Handler on a relay.Request, for handlers written
// against net/http.
func serveHTTP(ctx context.Context, h http.Handler, req relay.Request) relay.Response {
	u := &url.URL{RawQuery: req.RawQuery}
	if p, err := url.PathUnescape(req.Path); err == nil {
		u.Path, u.RawPath = p, req.Path
	} else {
		u.Path = req.Path
	}
	r, err := http.NewRequestWithContext(ctx, req.Method, "/", bytes.NewReader(req.Body))
	if err != nil {
		return relay.Response{Status: http.StatusBadRequest, Header: http.Header{"Content-Type": {"application/json"}},
			Body: []byte(`{"error":"bad-request"}`)}
	}
	r.URL = u
	r.RequestURI = u.RequestURI()
	r.Header = req.Header.Clone()
	if r.Header == nil {
		r.Header = http.Header{}
	}
	r.ContentLength = int64(len(req.Body))
	rec := &recorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return relay.Response{Status: rec.status, Header: rec.header, Body: rec.body.Bytes()}
}

// recorder is the smallest http.ResponseWriter that keeps what it is told.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

// fromAPIGateway is the platform's event translation, as a relay request.
func fromAPIGateway(ev events.APIGatewayV2HTTPRequest) (relay.Request, error) {
	req, err := container.FromAPIGateway(ev)
	return relay.Request(req), err
}

// toAPIGateway answers a relay response through the platform's
// translation.
func toAPIGateway(r relay.Response) events.APIGatewayV2HTTPResponse {
	return container.ToAPIGateway(container.Response{Status: r.Status, Header: r.Header, Body: r.Body})
}
