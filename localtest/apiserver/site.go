package apiserver

import (
	"fmt"

	byorelay "github.com/byorelay/byorelay"
	"github.com/byorelay/byorelay/internal/sitefn"
)

// ForSiteStack is the server for every HTTP function of site-template.yaml,
// each served by its sitefn handler over st: the site stack locally, routed
// as API Gateway routes it (the app API's IAM authorisation is not
// modelled: locally anyone on loopback may call it).
func ForSiteStack(st *sitefn.Stack, cfg Config) (*Server, error) {
	routes, err := RoutesFromTemplate(byorelay.SiteTemplate)
	if err != nil {
		return nil, err
	}
	handlers := map[string]Handler{}
	for _, f := range sitefn.Functions() {
		if f.Kind != sitefn.KindHTTP {
			continue
		}
		h, err := st.Handler(f.Name)
		if err != nil {
			return nil, fmt.Errorf("function %s: %w", f.Name, err)
		}
		handlers[f.LogicalID] = Handler(h)
	}
	cfg.Routes = routes
	cfg.Handlers = handlers
	return New(cfg)
}
