package lambdafn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/paramstore"
)

// PreviousSuffix names the parameter holding the secret being retired
// during a rotation: /byorelay/origin-secret-previous beside
// /byorelay/origin-secret. It exists only while the edge may still send the
// old value (README, "Rotating the origin secret").
const PreviousSuffix = "-previous"

// OriginSecretTTL is how long a container serves the secrets it read before
// reading them again: the longest a rotation step waits to be in force.
const OriginSecretTTL = time.Minute

// ParameterGetter is the one SSM call the origin lock makes;
// *paramstore.Client is one.
type ParameterGetter interface {
	Get(ctx context.Context, names ...string) ([]paramstore.Parameter, error)
}

// SSMOriginSecrets is the relay's origin lock as deployed: the edge's
// secret read from an SSM parameter, plus the "-previous" one while a
// rotation is under way, re-read every OriginSecretTTL.
type SSMOriginSecrets struct {
	api   ParameterGetter
	name  string
	clock clock.Clock
	log   *slog.Logger

	mu     sync.Mutex
	values []string
	readAt time.Time
}

// NewSSMOriginSecrets is the lock over the named parameter. It reads
// nothing yet: the first request reads it (a round trip at init was most
// of a function's init), and until one read succeeds every request is
// refused, 500 server-error, so a container that cannot read its secret
// never serves without the lock.
func NewSSMOriginSecrets(api ParameterGetter, name string, clk clock.Clock, log *slog.Logger) *SSMOriginSecrets {
	return &SSMOriginSecrets{api: api, name: name, clock: clk, log: log}
}

// Secrets is a relay.OriginSecrets. When a re-read fails, the values last
// read stay in force and the failure is logged: a Parameter Store outage
// must not take the relay down with it, and the values were good a minute
// ago. With no values read yet, a failure is the answer.
func (s *SSMOriginSecrets) Secrets(ctx context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	if s.values != nil && now.Sub(s.readAt) < OriginSecretTTL {
		return s.values, nil
	}
	values, err := s.read(ctx)
	switch {
	case err != nil && s.values == nil:
		return nil, err
	case err != nil:
		s.log.WarnContext(ctx, "origin secret not re-read; keeping the last values", slog.String("problem", err.Error()))
		s.readAt = now
		return s.values, nil
	}
	s.values, s.readAt = values, now
	return values, nil
}

// read fetches both parameters in one call. The current one must exist;
// the previous one is optional (GetParameters lists a missing name as
// invalid rather than failing).
func (s *SSMOriginSecrets) read(ctx context.Context) ([]string, error) {
	found, err := s.api.Get(ctx, s.name, s.name+PreviousSuffix)
	if err != nil {
		return nil, fmt.Errorf("lambdafn: read origin secret %s: %w", s.name, err)
	}
	var current, previous string
	for _, p := range found {
		switch p.Name {
		case s.name:
			current = p.Value
		case s.name + PreviousSuffix:
			previous = p.Value
		}
	}
	if current == "" {
		return nil, errors.New("lambdafn: origin secret parameter " + s.name + " is missing or empty")
	}
	if previous == "" {
		return []string{current}, nil
	}
	return []string{current, previous}, nil
}
