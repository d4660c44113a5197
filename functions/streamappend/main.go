// Command streamappend is the live-stream append Lambda function; lambdafn holds its wiring.
package main

import "github.com/byorelay/byorelay/internal/lambdafn"

func main() { lambdafn.Start(lambdafn.StreamAppend) }
