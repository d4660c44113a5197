package main

import (
	"context"
	"io"

	"github.com/byorelay/byorelay/controlplane/admincli"
)

// runAdmin is `byorelay admin ...`: the control plane's admin API from the
// command line (controlplane/admincli holds the commands).
func runAdmin(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return admincli.Run(ctx, args, stdout, stderr)
}
