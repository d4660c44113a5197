// Command sitepump is the site stack's cloud-lane pump (site-template.yaml);
// sitefn holds its wiring.
package main

import "github.com/byorelay/byorelay/internal/sitefn"

func main() { sitefn.Start(sitefn.Pump) }
