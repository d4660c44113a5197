// Package container is what every deployed function, of the relay stack
// (lambdafn) and of the site stack (sitefn) alike, takes from its Lambda
// container, and nothing else: the AWS configuration from the environment
// Lambda sets (no SDK config loader), the API Gateway HTTP API payload 2.0
// translation, and Start. Each stack's package imports this one rather
// than the other's, so a site function links none of the relay's clients
// and a relay function none of the site's.
package container

import (
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
)

// Start runs a function in its Lambda container: open builds its handler
// (configuration and clients; keys wait for the first request that needs
// them) once for the container's life, then the
// runtime loop serves it. What functions/<name>/main.go calls through its
// stack's Start. An open that fails exits at init, which Lambda reports as
// an init failure rather than as a function that answers 500 to
// everything; the record names the function and the problem.
func Start(name string, open func() (handler any, err error)) {
	h, err := open()
	if err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("init failed", slog.String("function", name), slog.String("problem", err.Error()))
		os.Exit(1)
	}
	lambda.Start(h)
}
