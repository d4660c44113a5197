package apiserver

import (
	"fmt"

	byorelay "github.com/byorelay/byorelay"
	"github.com/byorelay/byorelay/internal/lambdafn"
)

// ForStack is the server for every HTTP function of template.yaml, each
// served by its handler over st: one Stack for all of them, as one Lambda
// container would hold one per function (Stacks keep no routing state, so
// sharing one changes nothing a request can observe).
func ForStack(st *lambdafn.Stack, cfg Config) (*Server, error) {
	routes, err := RoutesFromTemplate(byorelay.Template)
	if err != nil {
		return nil, err
	}
	if len(routes) == 0 {
		return nil, fmt.Errorf("template.yaml declares no HttpApi routes")
	}
	handlers := map[string]Handler{}
	for _, f := range lambdafn.Functions() {
		if f.Kind != lambdafn.KindHTTP {
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
