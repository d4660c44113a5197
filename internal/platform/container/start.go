// Package container is what every deployed function, of the relay stack
// (lambdafn) and of the site stack (sitefn) alike, takes from its Lambda
// container, and nothing else: the AWS configuration from the environment
// Lambda sets (no SDK config loader), the API Gateway HTTP API payload 2.0
// translation, and Start. Each stack's package imports this one rather
// than the other's, so a site function links none of the relay's clients
// and a relay function none of the site's.
package container

import (
	"io"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/byorelay/byorelay/internal/platform/version"
)

// Start runs a function in its Lambda container: open builds its handler
// (configuration and clients; keys wait for the first request that needs
// them) once for the container's life, then the
// runtime loop serves it. What functions/<name>/main.go calls through its
// stack's Start. An open that fails exits at init, which Lambda reports as
// an init failure rather than as a function that answers 500 to
// everything; the record names the function and the problem. Every init
// logs the function and the release it runs, so a deployment's logs say
// which version answered.
func Start(name string, open func() (handler any, err error)) {
	log := initLog(os.Stderr, name)
	h, err := open()
	if err != nil {
		log.Error("init failed", slog.String("function", name), slog.String("problem", err.Error()))
		os.Exit(1)
	}
	lambda.Start(h)
}

// initLog writes a function's init record, its name and the release, to
// out, and is the logger for what init reports after it.
func initLog(out io.Writer, name string) *slog.Logger {
	log := slog.New(slog.NewJSONHandler(out, nil))
	log.Info("init", slog.String("function", name), slog.String("version", version.Version))
	return log
}
