// Command enqueue is the enqueue Lambda function; lambdafn holds its wiring.
package main

import "github.com/byorelay/byorelay/lambdafn"

func main() { lambdafn.Start(lambdafn.Enqueue) }
