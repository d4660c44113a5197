package peers

import (
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/byorelay/byorelay/localtest/fakellm"
)

// Model is a stand-in model server for one test: fakellm's, which answers
// fakellm.Answer(prompt), recording every prompt it was asked.
type Model struct {
	// Name is the one model listed; the daemon must be configured with it.
	Name string
	// URL is the base URL to configure as the backend's baseUrl (…/v1).
	URL string

	mu      sync.Mutex
	prompts []string
}

// NewModel serves a stand-in model (localtest/fakellm) on loopback until
// the test ends.
func NewModel(t testing.TB, name string) *Model {
	t.Helper()
	m := &Model{Name: name}
	srv := httptest.NewServer(fakellm.Handler(name, func(prompt string) {
		m.mu.Lock()
		m.prompts = append(m.prompts, prompt)
		m.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	m.URL = srv.URL + "/v1"
	return m
}

// Prompts are the prompts the model was asked, in order.
func (m *Model) Prompts() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.prompts...)
}
