// Command hello is the smallest Lambda function built the way byorelay's
// are (aws-lambda-go, lambda.norpc, static, stripped): the baseline `byorelay
// bench` measures each function's size and init duration against, so the
// report separates what byorelay adds from what any Go Lambda costs.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"
)

func main() {
	lambda.Start(func(context.Context, map[string]any) (string, error) { return "hello", nil })
}
