package main

import (
	"fmt"
	"io"
	"os"

	"github.com/byorelay/byorelay/localtest"
)

// startKeptDynamo starts DynamoDB Local on the tables kept in dir, so a
// restart finds every pairing and job where the last run left them: a
// daemon paired yesterday is still recognised today. fresh deletes them
// first. Both local stacks (serve, site) keep their tables this way, each
// in a directory of its own.
func startKeptDynamo(dir string, fresh bool, progress io.Writer) (endpoint string, stop func(), err error) {
	if fresh {
		if err := os.RemoveAll(dir); err != nil {
			return "", nil, fmt.Errorf("--fresh: %w", err)
		}
		fmt.Fprintf(progress, "--fresh: deleted the tables kept in %s\n", dir)
	}
	fmt.Fprintf(progress, "starting DynamoDB Local (tables kept in %s)…\n", dir)
	if endpoint, stop, err = localtest.StartDynamoOnDisk(dir, progress); err != nil {
		return "", nil, fmt.Errorf("DynamoDB Local: %w", err)
	}
	return endpoint, stop, nil
}
