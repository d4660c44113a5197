// Command catchall is the catchall Lambda function; lambdafn holds its wiring.
package main

import "github.com/byorelay/byorelay/internal/lambdafn"

func main() { lambdafn.Start(lambdafn.CatchAll) }
