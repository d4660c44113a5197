// Command payload is the payload Lambda function; lambdafn holds its wiring.
package main

import "github.com/byorelay/byorelay/internal/lambdafn"

func main() { lambdafn.Start(lambdafn.Payload) }
