package main

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/sitestore"
	sitedynamo "github.com/byorelay/byorelay/internal/sitestore/dynamo"
	"github.com/byorelay/byorelay/internal/sitestore/memory"
)

// openStore is where the site app keeps its jobs, runners and pairings:
// process memory without -table (gone when the process stops), else a
// DynamoDB table, made if absent, that a restarted site (or a second
// instance) reads exactly where the last one left off. Credentials and
// region come from the usual AWS chain; -ddb-endpoint points at DynamoDB
// Local.
func openStore(ctx context.Context, o options) (sitestore.Store, error) {
	if o.table == "" {
		return memory.New(memory.Options{}), nil
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, err
	}
	if o.ddbEndpoint != "" {
		cfg.BaseEndpoint = aws.String(o.ddbEndpoint)
	}
	db := dynamodb.NewFromConfig(cfg)
	if _, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(o.table)}); err != nil {
		var missing *types.ResourceNotFoundException
		if !errors.As(err, &missing) {
			return nil, err
		}
		if err := sitedynamo.CreateTable(ctx, db, o.table); err != nil {
			return nil, err
		}
	}
	// AWS: Subscribe reads the table's stream, so another replica's
	// writes reach this process's event streams.
	return sitedynamo.New(sitedynamo.Config{DB: db, Table: o.table, AWS: &cfg})
}
