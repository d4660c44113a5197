// Command sitesweeper is the site stack's sweeper function (site-template.yaml);
// sitefn holds its wiring.
package main

import "github.com/byorelay/byorelay/internal/sitefn"

func main() { sitefn.Start(sitefn.Sweeper) }
