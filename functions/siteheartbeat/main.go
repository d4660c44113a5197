// Command siteheartbeat is the site stack's heartbeat function (site-template.yaml);
// sitefn holds its wiring.
package main

import "github.com/byorelay/byorelay/internal/sitefn"

func main() { sitefn.Start(sitefn.Heartbeat) }
