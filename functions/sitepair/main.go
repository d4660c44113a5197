// Command sitepair is the site stack's pair function (site-template.yaml);
// sitefn holds its wiring.
package main

import "github.com/byorelay/byorelay/internal/sitefn"

func main() { sitefn.Start(sitefn.Pair) }
