// Command streamattach is the live-stream attach Lambda function, served
// through a function URL in RESPONSE_STREAM mode; lambdafn holds its wiring.
package main

import "github.com/byorelay/byorelay/internal/lambdafn"

func main() { lambdafn.Start(lambdafn.StreamAttach) }
