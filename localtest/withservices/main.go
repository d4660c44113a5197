// Command withservices runs a command with DynamoDB Local and a moto server
// started once for all of it, their endpoints in the environment
// (BYORELAY_DYNAMODB_ENDPOINT, BYORELAY_MOTO_ENDPOINT). `make test` wraps
// `go test ./...` in it so the test binaries share one JVM instead of each
// starting its own; every test still makes its own uniquely named tables.
//
//	go run ./localtest/withservices -- go test ./...
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/byorelay/byorelay/localtest"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: withservices -- COMMAND [ARG...]")
		os.Exit(2)
	}
	os.Exit(run(args))
}

func run(args []string) int {
	ddb, stopDDB, err := localtest.StartDynamo()
	if err != nil {
		fmt.Fprintln(os.Stderr, "withservices: DynamoDB Local:", err)
		return 1
	}
	defer stopDDB()
	moto, stopMoto, err := localtest.StartMoto()
	if err != nil {
		fmt.Fprintln(os.Stderr, "withservices: moto:", err)
		return 1
	}
	defer stopMoto()
	fmt.Fprintf(os.Stderr, "withservices: DynamoDB Local at %s, moto at %s\n", ddb, moto)

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(),
		localtest.EnvDynamoEndpoint+"="+ddb,
		localtest.EnvMotoEndpoint+"="+moto)
	// Pass signals on and wait for the child to finish, so the services are
	// stopped after it, not under it.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "withservices:", err)
		return 1
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "withservices:", err)
		return 1
	}
	return 0
}
