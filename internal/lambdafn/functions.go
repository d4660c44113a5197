package lambdafn

import (
	"fmt"

	"github.com/byorelay/byorelay/internal/stream/seal"
)

// Kind is how a function is invoked.
type Kind string

const (
	// KindHTTP functions take an API Gateway HTTP API v2 event.
	KindHTTP Kind = "http"
	// KindSchedule functions take an EventBridge Scheduler payload.
	KindSchedule Kind = "schedule"
	// KindStream functions sit behind a Lambda function URL in
	// RESPONSE_STREAM mode and serve an http.Handler through lambdaurl:
	// the live-stream attach, whose Server-Sent Events API Gateway's HTTP
	// API would buffer whole.
	KindStream Kind = "stream"
)

// Serves is what an HTTP function's handler does with its events beyond
// handing them to the relay, the one place each function's extra
// behaviour is chosen.
type Serves int

const (
	// ServesRelay hands every event to the relay.
	ServesRelay Serves = iota
	// ServesPage answers the verification page, and every other event as
	// ServesRelay.
	ServesPage
	// ServesAdmin is the control API.
	ServesAdmin
)

// Function is one deployed Lambda.
type Function struct {
	// Name is the short name: the directory under functions/, the FN of
	// `make invoke` and the sample event events/<Name>.json.
	Name string
	// LogicalID is the function's resource in template.yaml.
	LogicalID string
	Kind      Kind
	// Routes are the HTTP API route keys that reach it ("ANY /byollm/claim").
	// Every relay route is ANY: the reference checks no method, so a GET to
	// /byollm/claim must reach the same dispatch a POST does.
	Routes []string
	// Serves is what its handler does (KindHTTP only).
	Serves Serves
}

// Function names.
const (
	Pair      = "pair"
	Claim     = "claim"
	Fetch     = "fetch"
	Heartbeat = "heartbeat"
	Result    = "result"
	Release   = "release"
	Enqueue   = "enqueue"
	Payload   = "payload"
	Cancel    = "cancel"
	Pending   = "pending"
	Results   = "results"
	CatchAll  = "catchall"
	Admin     = "admin"
	Sweeper   = "sweeper"
	// The live-stream lane (docs/streaming.md): the daemon's append, an
	// HTTP API route like any daemon call, and the site's attach, a
	// function URL.
	StreamAppend = "streamappend"
	StreamAttach = "streamattach"
)

// Functions lists every function in the template, daemon plane, site plane,
// catch-all, control API, sweeper.
func Functions() []Function {
	var fns []Function
	for _, n := range []string{Pair, Claim, Fetch, Heartbeat, Result, Release} {
		fns = append(fns, Function{Name: n, LogicalID: logicalID(n), Kind: KindHTTP,
			Routes: []string{"ANY /byollm/" + n}})
	}
	for _, n := range []string{Enqueue, Payload, Cancel, Pending, Results} {
		fns = append(fns, Function{Name: n, LogicalID: logicalID(n), Kind: KindHTTP,
			Routes: []string{"ANY /relay/site/" + n}})
	}
	// The catch-all runs the whole relay, not a fixed 404: the reference
	// dispatches /byollm/anything/claim to claim and answers unknown
	// /byollm/* and /relay/* paths with a version refusal first, so only
	// the relay's own router can answer them identically.
	fns = append(fns,
		Function{Name: CatchAll, LogicalID: logicalID(CatchAll), Kind: KindHTTP, Routes: []string{"$default"}, Serves: ServesPage},
		Function{Name: Admin, LogicalID: logicalID(Admin), Kind: KindHTTP,
			Routes: []string{"ANY /admin/{proxy+}"}, Serves: ServesAdmin},
		Function{Name: Sweeper, LogicalID: logicalID(Sweeper), Kind: KindSchedule},
		Function{Name: StreamAppend, LogicalID: logicalID(StreamAppend), Kind: KindHTTP,
			Routes: []string{"ANY " + seal.StreamAppendPath}},
		// No route: its URL is the function's own, or the edge's
		// behaviour for the attach path (template.yaml).
		Function{Name: StreamAttach, LogicalID: logicalID(StreamAttach), Kind: KindStream},
	)
	return fns
}

// Lookup finds a function by its short name.
func Lookup(name string) (Function, error) {
	for _, f := range Functions() {
		if f.Name == name {
			return f, nil
		}
	}
	return Function{}, fmt.Errorf("lambdafn: no function %q", name)
}

// logicalID is the template resource name: "claim" -> "ClaimFunction".
func logicalID(name string) string {
	switch name {
	case CatchAll:
		return "CatchAllFunction"
	case StreamAppend:
		return "StreamAppendFunction"
	case StreamAttach:
		return "StreamAttachFunction"
	}
	return string(name[0]-'a'+'A') + name[1:] + "Function"
}
