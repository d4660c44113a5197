// Command pair is the pair Lambda function; lambdafn holds its wiring.
package main

import "github.com/byorelay/byorelay/internal/lambdafn"

func main() { lambdafn.Start(lambdafn.Pair) }
