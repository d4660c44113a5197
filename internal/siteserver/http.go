package siteserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"

	site "github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/protocol"
)

// ServeHTTP serves the daemon endpoints on net/http. The body limit is
// applied on content-length before reading and again on what is read.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	serve(w, r, s.Handle)
}

func serve(w http.ResponseWriter, r *http.Request, handle func(context.Context, Request) Response) {
	if n, err := strconv.ParseInt(r.Header.Get("Content-Length"), 10, 64); err == nil && n > MaxBodyBytes {
		write(w, encode(fail(protocol.CodeBadRequest, protocol.TooLargeMessage(n, MaxBodyBytes))))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	if err != nil {
		write(w, encode(fail(protocol.CodeBadRequest, "request body could not be read")))
		return
	}
	write(w, handle(r.Context(), Request{Method: r.Method, Path: r.URL.Path, Header: r.Header, Body: body}))
}

func write(w http.ResponseWriter, resp Response) {
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// decodeJSON is the strict decode of the app and admin APIs: one JSON
// object in UTF-8 (protocol.CheckBody, whose *protocol.BodyError says what
// is wrong and is returned as it is), no unknown members. The check comes
// first because encoding/json alone decodes null into a struct as nothing
// at all, reads a value followed by a stray closing bracket as one value,
// and turns invalid UTF-8 into U+FFFD in an owner or a job id.
func decodeJSON(raw []byte, v any) error {
	if problem := protocol.CheckBody(raw); problem != nil {
		return problem
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}

// jsonReply encodes an app or admin answer with encoding/json: these are
// our own shapes, not the protocol's byte-exact ones.
func jsonReply(status int, v any) Response {
	body, err := json.Marshal(v)
	if err != nil {
		return encode(serverError)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	return Response{Status: status, Header: h, Body: body}
}

// appError maps an app error to the protocol's error body.
func appError(err error) Response {
	var bad *InvalidInput
	if errors.As(err, &bad) {
		return encode(fail(protocol.CodeBadRequest, bad.Reason))
	}
	if errors.Is(err, ErrCloudLane) {
		return encode(fail(protocol.CodeBadRequest, err.Error()))
	}
	var refused *site.EnqueueRefused
	if errors.As(err, &refused) {
		// The relay's own word (purpose-not-declared, slot-unsatisfiable,
		// …): the job ended, and publishing it unchanged will not help.
		return encode(reply{status: http.StatusConflict, body: map[string]string{"error": refused.Code, "message": refused.Message}})
	}
	return encode(serverError)
}
