// Command payload is the payload Lambda function; lambdafn holds its wiring.
package main

import "github.com/byorelay/byorelay/lambdafn"

func main() { lambdafn.Start(lambdafn.Payload) }
