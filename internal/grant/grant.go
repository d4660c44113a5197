// Package grant is what a relay asks a control plane about each job a
// device claimed, and the answer: the types both sides share, below both,
// so the relay does not import the control plane that authors grants, and
// the control plane does not import the relay it answers
// (stacks_test.go).
package grant

import (
	"context"

	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
)

// Request is what the relay asks a control plane about one claimed job: a
// signed grant the daemon checks before it runs anything. The relay asks; it
// does not decide.
type Request struct {
	Job protocol.ClaimedStub
	// SiteID is the site in the control plane's namespace, for its policy
	// read.
	SiteID string
	// SiteKey is the site as the stub names it (the key id the device
	// pinned), carried straight off the stub and never derived: it is the
	// value that gets signed.
	SiteKey string
	// Purpose is the stub's own purpose, uninterpreted; "" when absent.
	Purpose      string
	Owner        string
	RunnerID     string
	Capabilities []protocol.Capability
	// Projection is the read the claim routed by, handed on so the control
	// plane checks policy against the same snapshot the route filter used:
	// two code paths over one read, and no second read per claim. Nil when
	// there is none, which an author must decline, never admit.
	Projection *projection.Projection
}

// Decision is the control plane's answer: exactly one of Granted or
// Declined.
type Decision struct {
	Granted  *protocol.SignedGrant
	Declined *Decline
}

// Decline is a refused grant. Permanent means never offer this job to this
// device again (a person removed from a team, a consent withdrawn): the job
// is released as refused, as a daemon's refusal is; otherwise it goes back
// with a not-before, because a plain release would be re-claimed at once and
// spin. Reason is for the log and the metrics: the relay never branches on
// it, or it would be a second implementation of a policy it does not own.
type Decline struct {
	Permanent bool
	Reason    string
}

// Author authors a grant for one claimed job. An error fails the claim
// request (500), as a throw does in the reference.
type Author func(ctx context.Context, in Request) (Decision, error)
