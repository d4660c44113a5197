// Command enqueue is the enqueue Lambda function; lambdafn holds its wiring.
package main

import "github.com/byorelay/byorelay/internal/lambdafn"

func main() { lambdafn.Start(lambdafn.Enqueue) }
