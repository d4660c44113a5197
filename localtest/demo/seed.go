package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/store/dynamo"
)

// SeedAPI is what Seed needs from a DynamoDB client.
type SeedAPI interface {
	ddb.TableCreator
	controlplane.DynamoAPI
}

var _ SeedAPI = (*dynamodb.Client)(nil)

// Seed makes table ready for the demo: created from template.yaml if it
// does not exist, and holding the demo projection (imported whole, so a
// table left over from another set of keys is brought up to these).
func (w *World) Seed(ctx context.Context, api SeedAPI, table string) error {
	err := dynamo.CreateTable(ctx, api, table)
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return err
	}
	// The import's own log lines would be noise: a seed's outcome is its
	// error.
	admin := controlplane.NewAdmin(controlplane.AdminConfig{
		Store:  controlplane.NewStore(controlplane.NewDynamoStorage(api, table)),
		Logger: slog.New(slog.DiscardHandler),
	})
	if _, err := admin.Import(ctx, w.Fixture()); err != nil {
		return fmt.Errorf("demo: import projection: %w", err)
	}
	return nil
}
