package chaos

import (
	"math/rand/v2"
	"net/http"
	"net/url"
	"time"
)

// anyReplica sends every request to a replica picked at random, as a load
// balancer in front of Lambda instances would: a client never talks to
// "its" relay. Signatures do not cover the host, so rewriting it is
// invisible to the protocol.
type anyReplica struct {
	replicas []*url.URL
	next     http.RoundTripper
}

func (a anyReplica) RoundTrip(r *http.Request) (*http.Response, error) {
	u := a.replicas[rand.IntN(len(a.replicas))]
	r = r.Clone(r.Context())
	r.URL.Scheme, r.URL.Host, r.Host = u.Scheme, u.Host, u.Host
	return a.next.RoundTrip(r)
}

// balancedClient is an HTTP client over every replica.
func balancedClient(urls []string) (*http.Client, error) {
	parsed := make([]*url.URL, len(urls))
	for i, s := range urls {
		u, err := url.Parse(s)
		if err != nil {
			return nil, err
		}
		parsed[i] = u
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// A killed replica leaves dead keep-alive connections; short idle
	// lifetimes keep retries from landing on them again and again.
	tr.IdleConnTimeout = 2 * time.Second
	tr.MaxIdleConnsPerHost = 16
	return &http.Client{
		Transport: anyReplica{replicas: parsed, next: tr},
		Timeout:   15 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}, nil
}
