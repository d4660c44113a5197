package admincli

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/byorelay/byorelay/internal/controlplane"
)

// migrate is `byorelay admin migrate --table T [--drop-legacy]`: it talks
// to DynamoDB itself, not to the admin API, because it must run before the
// version that reads records is deployed, while the relay still serves
// from the document (README, "Upgrading").
func migrate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	table := fs.String("table", "", "")
	drop := fs.Bool("drop-legacy", false, "")
	if err := fs.Parse(args); err != nil || *table == "" || fs.NArg() != 0 {
		return misuse(stderr, fmt.Errorf("usage: migrate --table T [--drop-legacy]"))
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "byorelay admin migrate: %v\n", err)
		return 1
	}
	res, err := controlplane.Migrate(ctx, dynamodb.NewFromConfig(cfg), *table, *drop)
	if err != nil {
		fmt.Fprintf(stderr, "byorelay admin migrate: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, res)
	return 0
}
