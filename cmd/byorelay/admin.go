package main

import (
	"context"
	"io"
	"os"
	"strings"

	"github.com/byorelay/byorelay/cmd/internal/localstack"
	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/controlplane/admincli"
)

// runAdmin is `byorelay admin ...`: the control plane's admin API from the
// command line (internal/controlplane/admincli holds the commands). With nothing
// in the environment it talks to the running local stack, found through
// the file serve writes, so `byorelay admin approve CODE` works in any
// terminal without exporting the per-run token first.
func runAdmin(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if stack, found := localstack.Find(); found {
		if os.Getenv(admincli.EnvEndpoint) == "" {
			_ = os.Setenv(admincli.EnvEndpoint, stack.URL+controlplane.AdminPrefix)
		}
		// The token goes only to the stack it belongs to.
		if os.Getenv(controlplane.EnvAdminToken) == "" && strings.HasPrefix(os.Getenv(admincli.EnvEndpoint), stack.URL+"/") {
			_ = os.Setenv(controlplane.EnvAdminToken, stack.AdminToken)
		}
	}
	return admincli.Run(ctx, args, stdout, stderr)
}
