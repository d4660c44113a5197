package apiserver

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// DefaultRouteKey is the catch-all route of an HTTP API.
const DefaultRouteKey = "$default"

// samDefaultTimeout is what SAM gives a function that names no Timeout.
const samDefaultTimeout = 3 * time.Second

// Route is one HttpApi route of template.yaml and the function it invokes.
type Route struct {
	// Key is the route key exactly as API Gateway spells it in the event:
	// "POST /byollm/claim", "ANY /relay/{proxy+}" or "$default".
	Key string
	// Function is the logical id of the AWS::Serverless::Function.
	Function string
	// CodeURI is the function's CodeUri ("functions/claim/"), "" if none.
	CodeURI string
	// Timeout is the function's Timeout (its own, else Globals, else SAM's
	// 3 s): the deadline the handler's context carries, as in Lambda.
	Timeout time.Duration

	method   string   // "ANY" or an upper-case verb; "" for $default
	segments []string // path split on "/", without the leading ""
}

// RoutesFromTemplate reads every HttpApi event of every
// AWS::Serverless::Function in a SAM template. It walks yaml.Nodes because
// CloudFormation's short-form tags (!Ref, !GetAtt) are opaque to a YAML
// decoder and may sit next to the fields we read.
func RoutesFromTemplate(template []byte) ([]Route, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(template, &doc); err != nil {
		return nil, fmt.Errorf("parse template: %w", err)
	}
	if len(doc.Content) == 0 {
		return nil, errors.New("template is empty")
	}
	root := doc.Content[0]
	globalTimeout := samDefaultTimeout
	if t := mapValue(mapValue(mapValue(root, "Globals"), "Function"), "Timeout"); t != nil {
		d, err := seconds(t)
		if err != nil {
			return nil, fmt.Errorf("Globals.Function.Timeout: %w", err)
		}
		globalTimeout = d
	}
	resources := mapValue(root, "Resources")
	if resources == nil {
		return nil, errors.New("template has no Resources")
	}
	var routes []Route
	seen := map[string]string{}
	for i := 0; i+1 < len(resources.Content); i += 2 {
		name, res := resources.Content[i].Value, resources.Content[i+1]
		if scalar(mapValue(res, "Type")) != "AWS::Serverless::Function" {
			continue
		}
		props := mapValue(res, "Properties")
		timeout := globalTimeout
		if t := mapValue(props, "Timeout"); t != nil {
			d, err := seconds(t)
			if err != nil {
				return nil, fmt.Errorf("%s.Timeout: %w", name, err)
			}
			timeout = d
		}
		events := mapValue(props, "Events")
		if events == nil || events.Kind != yaml.MappingNode {
			continue
		}
		for j := 0; j+1 < len(events.Content); j += 2 {
			ev := events.Content[j+1]
			if scalar(mapValue(ev, "Type")) != "HttpApi" {
				continue
			}
			evProps := mapValue(ev, "Properties")
			r, err := newRoute(scalar(mapValue(evProps, "Method")), scalar(mapValue(evProps, "Path")))
			if err != nil {
				return nil, fmt.Errorf("%s.Events.%s: %w", name, events.Content[j].Value, err)
			}
			// API Gateway refuses a second route with the same key; a
			// template that has one would deploy nowhere, so say so here.
			if prev, dup := seen[r.Key]; dup {
				return nil, fmt.Errorf("route %q is declared by both %s and %s", r.Key, prev, name)
			}
			seen[r.Key] = name
			r.Function = name
			r.CodeURI = scalar(mapValue(props, "CodeUri"))
			r.Timeout = timeout
			routes = append(routes, r)
		}
	}
	sort.SliceStable(routes, func(a, b int) bool { return routes[a].Key < routes[b].Key })
	return routes, nil
}

// newRoute builds a route from an HttpApi event's Method and Path. SAM makes
// an event with neither the $default route; "$default" may also be spelt
// out as the Path.
func newRoute(method, path string) (Route, error) {
	if path == "" && method == "" || path == DefaultRouteKey {
		return Route{Key: DefaultRouteKey}, nil
	}
	if path == "" || method == "" {
		return Route{}, errors.New("an HttpApi event needs both Path and Method, or neither")
	}
	if !strings.HasPrefix(path, "/") {
		return Route{}, fmt.Errorf("path %q does not start with /", path)
	}
	method = strings.ToUpper(method)
	segments := strings.Split(path[1:], "/")
	for i, s := range segments {
		if strings.HasSuffix(s, "+}") && i != len(segments)-1 {
			return Route{}, fmt.Errorf("path %q: a greedy variable must be the last segment", path)
		}
	}
	return Route{Key: method + " " + path, method: method, segments: segments}, nil
}

// match is how well a route matches a request, for choosing among several.
type match struct {
	route  *Route
	params map[string]string
	// rank orders the kinds of match API Gateway prefers: every segment
	// literal, then single-segment variables, then a greedy variable.
	rank int
	// literals counts literal segments: among greedy routes the longest
	// fixed prefix wins.
	literals int
	anyVerb  bool
}

const (
	rankLiteral = iota
	rankVariable
	rankGreedy
)

// better reports whether m is preferred to o: the more specific path first,
// then a route for this very method over ANY (ANY matches "all methods that
// you haven't defined for a resource").
func (m match) better(o match) bool {
	if m.rank != o.rank {
		return m.rank < o.rank
	}
	if m.literals != o.literals {
		return m.literals > o.literals
	}
	return !m.anyVerb && o.anyVerb
}

// matchRoute reports whether r serves method and path (decoded, starting
// with "/"), with the path parameters it binds.
func (r *Route) matchRoute(method, path string) (match, bool) {
	if r.Key == DefaultRouteKey {
		return match{}, false
	}
	if r.method != "ANY" && r.method != method {
		return match{}, false
	}
	got := strings.Split(strings.TrimPrefix(path, "/"), "/")
	m := match{route: r, rank: rankLiteral, anyVerb: r.method == "ANY"}
	for i, seg := range r.segments {
		if name, greedy := variable(seg); greedy {
			// {proxy+} needs at least one character after the prefix.
			if i >= len(got) {
				return match{}, false
			}
			rest := strings.Join(got[i:], "/")
			if rest == "" {
				return match{}, false
			}
			m.bind(name, rest)
			m.rank = rankGreedy
			return m, true
		}
		if i >= len(got) {
			return match{}, false
		}
		if name, ok := singleVariable(seg); ok {
			if got[i] == "" {
				return match{}, false
			}
			m.bind(name, got[i])
			m.rank = max(m.rank, rankVariable)
			continue
		}
		if seg != got[i] {
			return match{}, false
		}
		m.literals++
	}
	if len(got) != len(r.segments) {
		return match{}, false
	}
	return m, true
}

func (m *match) bind(name, value string) {
	if m.params == nil {
		m.params = map[string]string{}
	}
	m.params[name] = value
}

// variable reports whether seg is a greedy variable {name+}, and its name.
func variable(seg string) (string, bool) {
	if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "+}") {
		return seg[1 : len(seg)-2], true
	}
	return "", false
}

// singleVariable reports whether seg is a one-segment variable {name}.
func singleVariable(seg string) (string, bool) {
	if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
		return seg[1 : len(seg)-1], true
	}
	return "", false
}

// selectRoute picks the route API Gateway would: the best matching explicit
// route, else $default, else none.
func selectRoute(routes []Route, method, path string) (match, bool) {
	var best match
	found := false
	for i := range routes {
		m, ok := routes[i].matchRoute(method, path)
		if ok && (!found || m.better(best)) {
			best, found = m, true
		}
	}
	if found {
		return best, true
	}
	for i := range routes {
		if routes[i].Key == DefaultRouteKey {
			return match{route: &routes[i]}, true
		}
	}
	return match{}, false
}

func mapValue(node *yaml.Node, key string) *yaml.Node {
	if node == nil || node.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(node.Content); i += 2 {
		if node.Content[i].Value == key {
			return node.Content[i+1]
		}
	}
	return nil
}

func scalar(node *yaml.Node) string {
	if node == nil || node.Kind != yaml.ScalarNode {
		return ""
	}
	return node.Value
}

func seconds(node *yaml.Node) (time.Duration, error) {
	n, err := strconv.Atoi(scalar(node))
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("want a positive number of seconds, got %q", scalar(node))
	}
	return time.Duration(n) * time.Second, nil
}
