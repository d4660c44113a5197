package lambdafn

import (
	"context"
	"fmt"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdaurl"

	"github.com/byorelay/byorelay/internal/platform/container"
)

// Handler is an HTTP function: an API Gateway HTTP API event (payload
// format 2.0) in, a response out. An error return means the invocation
// failed (API Gateway answers 500 and the function's Errors metric counts
// it); an answer the relay chose, 500s included, is a response.
type Handler func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// Start runs the named function in a Lambda container: configuration from
// the environment, one Stack for the container's life, then the runtime
// loop. What functions/<name>/main.go calls, and all it calls.
func Start(name string) { container.Start(name, open(name)) }

// open builds the named function's handler from the process environment.
func open(name string) func() (any, error) {
	return func() (any, error) {
		f, err := Lookup(name)
		if err != nil {
			return nil, err
		}
		env, err := EnvFromOS()
		if err != nil {
			return nil, err
		}
		st, err := Open(env, Options{})
		if err != nil {
			return nil, err
		}
		switch f.Kind {
		case KindSchedule:
			return st.SweepHandler(), nil
		case KindHTTP:
			return st.Handler(name)
		case KindStream:
			// lambdaurl answers in the function URL's streaming response
			// format, so each event reaches the reader as the handler
			// writes it.
			return lambdaurl.Wrap(st.AttachHandler()), nil
		}
		return nil, fmt.Errorf("lambdafn: %s has no kind", name)
	}
}
