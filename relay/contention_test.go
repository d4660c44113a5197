package relay_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/relay"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/memory"
)

// contendedStore loses every claim to other replicas, as store/dynamo does
// when its conditional writes keep failing. A mock: DynamoDB Local never
// produces this contention, and the relay's answer to it is what is tested.
type contendedStore struct{ backend }

func (contendedStore) Claim(context.Context, store.ClaimInput) ([]protocol.ClaimedStub, error) {
	return nil, store.ErrContention
}

type contentionMetrics struct {
	relay.NopMetrics
	conflicts []string
}

func (m *contentionMetrics) Conflict(op string) { m.conflicts = append(m.conflicts, op) }

// A store that lost to other writers changed nothing, so the client is told
// to retry (503, which clients retry) rather than shown a 500 bug.
func TestContentionAnswersARetryable503(t *testing.T) {
	metrics := &contentionMetrics{}
	f := storeFactory{name: "contended", new: func(t *testing.T, opts store.Options) backend {
		return contendedStore{memory.New(opts)}
	}}
	w := newWorld(t, f, func(c *relay.Config) { c.Metrics = metrics })
	resp := w.daemonCall(w.daemon, "claim", claimBody(w.daemon, 1))
	expect(t, resp, http.StatusServiceUnavailable,
		errBody(protocol.CodeServerError, "the relay is busy with this job; try again shortly"))
	if len(metrics.conflicts) != 1 || metrics.conflicts[0] != "claim" {
		t.Fatalf("conflicts counted: %v, want [claim]", metrics.conflicts)
	}
}
