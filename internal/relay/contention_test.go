package relay_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/memory"
)

// contendedStore loses every claim to other replicas, as store/dynamo does
// when its conditional writes keep failing. A mock: DynamoDB Local never
// produces this contention, and the relay's answer to it is what is tested.
type contendedStore struct{ backend }

func (contendedStore) Claim(context.Context, store.ClaimInput) ([]store.Claimed, error) {
	return nil, store.ErrContention
}

type contentionMetrics struct {
	relay.NopMetrics
	conflicts []string
}

func (m *contentionMetrics) Conflict(op string) { m.conflicts = append(m.conflicts, op) }

func (contendedStore) PutPairing(context.Context, store.PendingPairing) (store.PutResult, error) {
	return "", store.ErrContention
}

func (contendedStore) TakePayload(context.Context, store.HolderInput) (store.PayloadResult, error) {
	return store.PayloadResult{}, store.ErrContention
}

// A store that lost to other writers changed nothing, so the client is told
// to retry (503, which clients retry) rather than shown a 500 bug, in words
// that name what was busy: a pairing is not a job.
func TestContentionIsARetryable503InTheOperationsWords(t *testing.T) {
	cases := []struct {
		endpoint string
		call     func(w *world) relay.Response
		words    string
	}{
		{"claim", func(w *world) relay.Response { return w.daemonCall(w.daemon, "claim", claimBody(w.daemon, 1)) },
			"the relay is busy right now; try again shortly"},
		{"fetch", func(w *world) relay.Response {
			return w.daemonCall(w.daemon, "fetch", protocol.FetchRequest{ProtocolVersion: "2", RunnerID: w.daemon.RunnerID, JobID: "j1", LeaseID: "l1"})
		}, "the relay is busy with this job; try again shortly"},
		{"pair", func(w *world) relay.Response {
			return pairPost(t, w, startBody(relaytest.NewDaemon(t, "new", "bob")))
		}, "the relay is busy with other pairings; try again shortly"},
	}
	for _, tc := range cases {
		t.Run(tc.endpoint, func(t *testing.T) {
			metrics := &contentionMetrics{}
			f := storeFactory{name: "contended", new: func(t *testing.T, opts store.Options) backend {
				return contendedStore{memory.New(opts)}
			}}
			w := newWorld(t, f, func(c *relay.Config) { c.Metrics = metrics })
			expect(t, tc.call(w), http.StatusServiceUnavailable, errBody(protocol.CodeServerError, tc.words))
			if len(metrics.conflicts) != 1 || metrics.conflicts[0] != tc.endpoint {
				t.Fatalf("conflicts counted: %v, want [%s]", metrics.conflicts, tc.endpoint)
			}
		})
	}
}
