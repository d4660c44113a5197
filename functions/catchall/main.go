// Command catchall is the catchall Lambda function; lambdafn holds its wiring.
package main

import "github.com/byorelay/byorelay/lambdafn"

func main() { lambdafn.Start(lambdafn.CatchAll) }
