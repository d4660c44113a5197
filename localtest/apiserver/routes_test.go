package apiserver

import (
	"strings"
	"testing"
	"time"
)

// testTemplate has the shapes a SAM template uses: short-form tags next to
// the fields read, Globals, a $default event without Path and Method, a
// greedy route, and a function with no HTTP events.
const testTemplate = `
Transform: AWS::Serverless-2016-10-31
Globals:
  Function:
    Timeout: 10
Resources:
  Api:
    Type: AWS::Serverless::HttpApi
  ClaimFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/claim/
      Events:
        Claim:
          Type: HttpApi
          Properties:
            ApiId: !Ref Api
            Path: /byollm/claim
            Method: post
  PetsFunction:
    Type: AWS::Serverless::Function
    Properties:
      Timeout: 2
      Events:
        One:
          Type: HttpApi
          Properties: {ApiId: !Ref Api, Path: /pets/dog/1, Method: GET}
        ById:
          Type: HttpApi
          Properties: {ApiId: !Ref Api, Path: "/pets/dog/{id}", Method: GET}
        Greedy:
          Type: HttpApi
          Properties: {ApiId: !Ref Api, Path: "/pets/{proxy+}", Method: GET}
        AnyPets:
          Type: HttpApi
          Properties: {ApiId: !Ref Api, Path: /pets/dog/1, Method: ANY}
  RootFunction:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        Everything:
          Type: HttpApi
          Properties: {ApiId: !Ref Api, Path: "/{proxy+}", Method: ANY}
  CatchAllFunction:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        Default:
          Type: HttpApi
          Properties:
            ApiId: !Ref Api
  SweeperFunction:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        Tick:
          Type: ScheduleV2
          Properties: {ScheduleExpression: rate(1 minute)}
`

func TestRoutesFromTemplateReadsEveryHttpApiEvent(t *testing.T) {
	routes, err := RoutesFromTemplate([]byte(testTemplate))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Route{}
	for _, r := range routes {
		got[r.Key] = r
	}
	want := map[string]struct {
		function string
		timeout  time.Duration
	}{
		"POST /byollm/claim": {"ClaimFunction", 10 * time.Second},
		"GET /pets/dog/1":    {"PetsFunction", 2 * time.Second},
		"GET /pets/dog/{id}": {"PetsFunction", 2 * time.Second},
		"GET /pets/{proxy+}": {"PetsFunction", 2 * time.Second},
		"ANY /pets/dog/1":    {"PetsFunction", 2 * time.Second},
		"ANY /{proxy+}":      {"RootFunction", 10 * time.Second},
		DefaultRouteKey:      {"CatchAllFunction", 10 * time.Second},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d routes %v, want %d", len(got), keys(got), len(want))
	}
	for key, w := range want {
		r, ok := got[key]
		if !ok {
			t.Errorf("route %q missing; have %v", key, keys(got))
			continue
		}
		if r.Function != w.function || r.Timeout != w.timeout {
			t.Errorf("route %q: function %s timeout %v, want %s %v", key, r.Function, r.Timeout, w.function, w.timeout)
		}
	}
	if got["POST /byollm/claim"].CodeURI != "functions/claim/" {
		t.Errorf("CodeURI = %q", got["POST /byollm/claim"].CodeURI)
	}
}

func TestRoutesFromTemplateRefuseWhatAPIGatewayRefuses(t *testing.T) {
	cases := map[string]string{
		"a duplicate route key": `
Resources:
  A:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        E: {Type: HttpApi, Properties: {Path: /x, Method: GET}}
  B:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        E: {Type: HttpApi, Properties: {Path: /x, Method: get}}
`,
		"a greedy variable before the end": `
Resources:
  A:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        E: {Type: HttpApi, Properties: {Path: "/{proxy+}/x", Method: GET}}
`,
		"a path without a method": `
Resources:
  A:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        E: {Type: HttpApi, Properties: {Path: /x}}
`,
	}
	for name, tmpl := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := RoutesFromTemplate([]byte(tmpl)); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestSelectRouteChoosesAsAPIGatewayDoes(t *testing.T) {
	routes, err := RoutesFromTemplate([]byte(testTemplate))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, method, path string
		wantKey            string
		wantParams         map[string]string
	}{
		{"an exact route and method wins", "GET", "/pets/dog/1", "GET /pets/dog/1", nil},
		{"an exact path under ANY beats variables for another method", "DELETE", "/pets/dog/1", "ANY /pets/dog/1", nil},
		{"a one-segment variable beats a greedy one", "GET", "/pets/dog/2", "GET /pets/dog/{id}", map[string]string{"id": "2"}},
		{"the longer greedy prefix wins", "GET", "/pets/cat/1/2", "GET /pets/{proxy+}", map[string]string{"proxy": "cat/1/2"}},
		{"a greedy route for another method falls to ANY", "POST", "/pets/cat", "ANY /{proxy+}", map[string]string{"proxy": "pets/cat"}},
		{"an exact route beats the root greedy route", "POST", "/byollm/claim", "POST /byollm/claim", nil},
		{"the method must match an explicit route", "GET", "/byollm/claim", "ANY /{proxy+}", map[string]string{"proxy": "byollm/claim"}},
		{"a trailing slash is another path", "POST", "/byollm/claim/", "ANY /{proxy+}", map[string]string{"proxy": "byollm/claim/"}},
		{"the bare root is left to $default", "GET", "/", DefaultRouteKey, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, ok := selectRoute(routes, c.method, c.path)
			if !ok {
				t.Fatal("no route")
			}
			if m.route.Key != c.wantKey {
				t.Fatalf("route %q, want %q", m.route.Key, c.wantKey)
			}
			if len(m.params) != len(c.wantParams) {
				t.Fatalf("params %v, want %v", m.params, c.wantParams)
			}
			for k, v := range c.wantParams {
				if m.params[k] != v {
					t.Fatalf("params %v, want %v", m.params, c.wantParams)
				}
			}
		})
	}
}

func TestSelectRouteWithoutDefaultFindsNothing(t *testing.T) {
	r, err := newRoute("POST", "/byollm/claim")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := selectRoute([]Route{r}, "POST", "/byollm/fetch"); ok {
		t.Fatal("matched")
	}
}

func keys(m map[string]Route) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return strings.Join(ks, ", ")
}
