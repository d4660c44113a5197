// Package byorelay holds what belongs to the repository as a whole: the SAM
// template, embedded so that Go code derives the table it creates from the
// same definition CloudFormation deploys.
package byorelay

import _ "embed"

// Template is template.yaml, byte for byte.
//
//go:embed template.yaml
var Template []byte
