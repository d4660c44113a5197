// Package byorelay holds what belongs to the repository as a whole: the SAM
// templates, embedded for tests and local tooling (the local API server's
// routes, the checks that hold the stores' tables to the templates). No
// deployed function imports it.
package byorelay

import _ "embed"

// Template is template.yaml, byte for byte.
//
//go:embed template.yaml
var Template []byte
