package byorelay

import _ "embed"

// SiteTemplate is site-template.yaml, byte for byte: the direct-lane site
// stack, whose SiteTable the site store's tests create from.
//
//go:embed site-template.yaml
var SiteTemplate []byte
