package lambdafn

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
)

// Start runs the named function in a Lambda container: configuration from
// the environment, one Stack for the container's life, then the runtime
// loop. What functions/<name>/main.go calls, and all it calls. A
// configuration error exits at init, which Lambda reports as an init
// failure rather than as a function that answers 500 to everything.
func Start(name string) {
	if err := start(name); err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("init failed", slog.String("function", name), slog.String("problem", err.Error()))
		os.Exit(1)
	}
}

func start(name string) error {
	f, err := Lookup(name)
	if err != nil {
		return err
	}
	env, err := EnvFromOS()
	if err != nil {
		return err
	}
	st, err := Open(context.Background(), env, Options{})
	if err != nil {
		return err
	}
	switch f.Kind {
	case KindSchedule:
		lambda.Start(st.SweepHandler())
	case KindHTTP:
		h, err := st.Handler(name)
		if err != nil {
			return err
		}
		lambda.Start(h)
	default:
		return fmt.Errorf("lambdafn: %s has no kind", name)
	}
	return nil
}
