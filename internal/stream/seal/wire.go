package seal

import "errors"

// The live-stream lane (docs/streaming.md): a proposed extension mounted
// under its own prefix, so no v2 path, body or dispatch rule changes and a
// 0.1.1 peer never meets it.
//
//	POST /byorelay/stream/append   daemon: one sealed frame, signed as a daemon
//	                               request for endpoint "append"
//	POST /byorelay/stream/attach   site: replay from an offset and follow;
//	                               signed as a site request for "attach";
//	                               long-poll JSON here, SSE from relay.HTTPHandler
const (
	StreamPrefix     = "/byorelay/stream/"
	StreamAppendPath = StreamPrefix + "append"
	StreamAttachPath = StreamPrefix + "attach"
)

// StreamsHeader is how a daemon opts in to live streams: a header on its
// claim request, which a 0.1.1 daemon never sends, so it is never offered
// a stub with streaming set; the claim body and response stay byte for
// byte v2. Unsigned, like every header outside the signature: flipping it
// on the way can only send a streaming job to a device that does not
// stream (its reader ends stale and reads the sealed result) or hold one
// back from a device that does.
const (
	StreamsHeader   = "Byorelay-Streams"
	StreamsVersion1 = "v1"
)

// AppendFrameRequest is a daemon appending one sealed frame under its grant.
type AppendFrameRequest struct {
	ProtocolVersion string `json:"protocolVersion"`
	JobID           string `json:"jobId"`
	LeaseID         string `json:"leaseId"`
	Frame           Frame  `json:"frame"`
	// Interrupted says, in clear, that this end frame seals the status
	// `interrupted` (the device stopped before the answer's end: shut
	// down, or its lease's deadline passed). The relay cannot read the
	// sealed status, and it holds every other end until the job's result
	// is stored; an interrupted end has no result to wait for, so it is
	// passed to readers at once. It decides only when the relay passes the
	// end: the reader takes the status from the sealed frame. Only on an
	// end frame.
	Interrupted bool `json:"interrupted,omitempty"`
}

// Validate implements protocol.Validator.
func (r *AppendFrameRequest) Validate() error {
	if r.JobID == "" || r.LeaseID == "" {
		return errors.New("jobId and leaseId are required")
	}
	if r.Interrupted && r.Frame.Kind != KindEnd {
		return errors.New("interrupted is only said of an end frame")
	}
	return r.Frame.valid()
}

// AppendFrameResponse is what the store confirmed: the committed length and
// the next counter, never what the daemon assumed.
type AppendFrameResponse struct {
	Seq             int64 `json:"seq"`
	N               int64 `json:"n"`
	Duplicate       bool  `json:"duplicate,omitempty"`
	CancelRequested bool  `json:"cancelRequested,omitempty"`
}

// AttachRequest is a site reading its job's stream from an offset.
type AttachRequest struct {
	ProtocolVersion string `json:"protocolVersion"`
	SiteID          string `json:"siteId"`
	JobID           string `json:"jobId"`
	From            int64  `json:"from"`
}

// Validate implements protocol.Validator. A negative from is refused, as
// rindle's JSON route refuses it (HTTP 400 invalid from).
func (r *AttachRequest) Validate() error {
	if r.SiteID == "" || r.JobID == "" {
		return errors.New("siteId and jobId are required")
	}
	if r.From < 0 {
		return errors.New("invalid from")
	}
	return nil
}

// AttachResponse is one long-poll answer: events in order, and whether the
// last one was terminal. A reader that is not done attaches again from the
// offset it holds.
type AttachResponse struct {
	Events []Event `json:"events"`
	Done   bool    `json:"done"`
}

// valid is the shape check every party applies to a frame's clear fields.
func (f Frame) valid() error {
	switch {
	case f.N < 0 || f.From < 0:
		return errors.New("negative counter")
	case f.Kind == KindChunk && f.Seq <= f.From:
		return errors.New("a chunk covers at least one unit")
	case f.Kind == KindEnd && f.Seq != f.From:
		return errors.New("an end covers nothing")
	case f.Kind != KindChunk && f.Kind != KindEnd:
		return errors.New("unknown frame kind")
	case f.CT == "" || len(f.CT) > MaxCiphertext:
		return errors.New("ciphertext missing or too large")
	}
	return nil
}

// MaxCiphertext bounds one frame's ciphertext (base64url): a chunk of
// MaxTextUnits UTF-16 units is at most 3 bytes of UTF-8 each, plus nonce
// and tag, base64-inflated: under 17 KiB.
const MaxCiphertext = 24 * 1024

// Validate implements protocol.Validator.
func (r *AppendFrameResponse) Validate() error {
	if r.Seq < 0 || r.N < 0 {
		return errors.New("negative counters")
	}
	return nil
}
