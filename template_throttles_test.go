package byorelay_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	byorelay "github.com/byorelay/byorelay"
	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/protocol"
)

// The fleet the template's defaults are sized for (docs/sizing.md): change
// one here, in that page and in template.yaml together.
const (
	fleetDaemons   = 10_000
	fleetSites     = 100
	sitePollSecs   = 0.25
	liveStreams    = 300
	pairingsAtOnce = 40
	headroom       = 2
	catchAllBound  = 100
)

// wantDefaults is each sizing parameter's default, from the daemon's own
// rates: a change to its heartbeat interval or its flush interval shows
// here as a default that no longer matches.
func wantDefaults() map[string]float64 {
	h := daemon.DefaultHeartbeatInterval.Seconds()
	f := daemon.DefaultFlushEvery.Seconds()
	pair := float64(protocol.PairPollIntervalMs) / 1000
	daemonRate := fleetDaemons / h * headroom
	siteRate := fleetSites / sitePollSecs * headroom
	appendRate := liveStreams / f
	return map[string]float64{
		"DaemonRouteRateLimit":    daemonRate,
		"DaemonRouteBurstLimit":   2 * daemonRate,
		"SiteRouteRateLimit":      siteRate,
		"SiteRouteBurstLimit":     2 * siteRate,
		"StreamAppendRateLimit":   appendRate,
		"StreamAppendBurstLimit":  2 * appendRate,
		"PairRouteRateLimit":      pairingsAtOnce / pair,
		"PairRouteBurstLimit":     pairingsAtOnce + 10,
		"StreamAttachConcurrency": liveStreams,
		"CatchAllConcurrency":     catchAllBound,
	}
}

// routeThrottle is one HttpApi event's route and the parameters its
// RouteSettings reference ("" when it has none).
type routeThrottle struct {
	function, path string
	rate, burst    string
}

func (p tpl) routeThrottles(t *testing.T) []routeThrottle {
	t.Helper()
	var out []routeThrottle
	res := at(p.root, "Resources")
	for i := 0; i+1 < len(res.Content); i += 2 {
		name, r := res.Content[i].Value, res.Content[i+1]
		if at(r, "Type").Value != "AWS::Serverless::Function" {
			continue
		}
		ev := at(r, "Properties", "Events")
		if ev == nil {
			continue
		}
		for j := 0; j+1 < len(ev.Content); j += 2 {
			e := ev.Content[j+1]
			if at(e, "Type").Value != "HttpApi" {
				continue
			}
			rt := routeThrottle{function: name}
			if path := at(e, "Properties", "Path"); path != nil {
				rt.path = path.Value
			}
			rt.rate = refOf(t, at(e, "Properties", "RouteSettings", "ThrottlingRateLimit"))
			rt.burst = refOf(t, at(e, "Properties", "RouteSettings", "ThrottlingBurstLimit"))
			out = append(out, rt)
		}
	}
	return out
}

// refOf is the parameter a value references; a literal fails the test,
// because every limit is meant to be an operator's to set.
func refOf(t *testing.T, n *yaml.Node) string {
	t.Helper()
	if n == nil {
		return ""
	}
	if n.Tag != "!Ref" {
		t.Fatalf("a throttle set to %q, not a parameter", n.Value)
	}
	return n.Value
}

func TestEveryRouteIsThrottledFromItsPlanesParameters(t *testing.T) {
	p := parseTemplate(t)
	params := at(p.root, "Parameters")
	def := at(p.resource(t, "RelayApi"), "Properties", "DefaultRouteSettings")
	if got := refOf(t, at(def, "ThrottlingRateLimit")); got != "SiteRouteRateLimit" {
		t.Fatalf("DefaultRouteSettings rate from %q, want SiteRouteRateLimit", got)
	}
	if got := refOf(t, at(def, "ThrottlingBurstLimit")); got != "SiteRouteBurstLimit" {
		t.Fatalf("DefaultRouteSettings burst from %q, want SiteRouteBurstLimit", got)
	}
	plane := func(path string) string {
		switch {
		case path == "/byollm/pair":
			return "PairRoute"
		case path == "/byorelay/stream/append":
			return "StreamAppend"
		case strings.HasPrefix(path, "/byollm/"):
			return "DaemonRoute"
		case strings.HasPrefix(path, "/relay/site/"):
			return "SiteRoute"
		}
		return "" // the catch-all ($default) and admin: DefaultRouteSettings
	}
	seen := map[string]bool{}
	for _, rt := range p.routeThrottles(t) {
		want := plane(rt.path)
		if want == "" {
			if rt.rate != "" || rt.burst != "" {
				t.Errorf("%s %q: its own throttle (%s, %s) where the default was meant", rt.function, rt.path, rt.rate, rt.burst)
			}
			continue
		}
		if rt.rate != want+"RateLimit" || rt.burst != want+"BurstLimit" {
			t.Errorf("%s %q: throttled by (%q, %q), want (%sRateLimit, %sBurstLimit)", rt.function, rt.path, rt.rate, rt.burst, want, want)
		}
		for _, ref := range []string{rt.rate, rt.burst} {
			if at(params, ref) == nil {
				t.Errorf("%s: %s is not a parameter", rt.function, ref)
			}
		}
		seen[rt.path] = true
	}
	for _, path := range []string{"/byollm/pair", "/byollm/claim", "/byollm/heartbeat", "/relay/site/pending", "/relay/site/results", "/byorelay/stream/append"} {
		if !seen[path] {
			t.Errorf("no throttled route for %s", path)
		}
	}
}

func TestOnlyTheAppendRouteUsesTheAppendLimit(t *testing.T) {
	p := parseTemplate(t)
	n := 0
	for _, rt := range p.routeThrottles(t) {
		if rt.rate == "StreamAppendRateLimit" || rt.burst == "StreamAppendBurstLimit" {
			if rt.function != "StreamAppendFunction" || rt.path != "/byorelay/stream/append" {
				t.Errorf("%s %q uses the append limit", rt.function, rt.path)
			}
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d routes use the append limit, want the append route alone", n)
	}
}

// A reservation is also a ceiling; 0 must drop the property, because a
// reservation of 0 would throttle every invocation of the function.
func TestStreamReaderConcurrencyIsBoundedByItsParameter(t *testing.T) {
	p := parseTemplate(t)
	for function, param := range map[string]string{
		"StreamAttachFunction": "StreamAttachConcurrency",
		"CatchAllFunction":     "CatchAllConcurrency",
	} {
		rc := at(p.resource(t, function), "Properties", "ReservedConcurrentExecutions")
		if rc == nil || rc.Tag != "!If" || len(rc.Content) != 3 {
			t.Fatalf("%s: ReservedConcurrentExecutions is not an !If on its parameter", function)
		}
		cond, on, off := rc.Content[0].Value, rc.Content[1], rc.Content[2]
		if on.Tag != "!Ref" || on.Value != param {
			t.Errorf("%s: bounded by %s %q, want !Ref %s", function, on.Tag, on.Value, param)
		}
		if off.Tag != "!Ref" || off.Value != "AWS::NoValue" {
			t.Errorf("%s: unbounded branch is %s %q, want !Ref AWS::NoValue", function, off.Tag, off.Value)
		}
		if !isNotZero(at(p.root, "Conditions", cond), param) {
			t.Errorf("%s: condition %s is not !Not [!Equals [!Ref %s, 0]]", function, cond, param)
		}
		if min := at(p.root, "Parameters", param, "MinValue"); min == nil || min.Value != "0" {
			t.Errorf("%s: MinValue should be 0 (no bound)", param)
		}
	}
}

// isNotZero holds for `!Not [!Equals [!Ref param, 0]]`.
func isNotZero(c *yaml.Node, param string) bool {
	if c == nil || c.Tag != "!Not" || len(c.Content) != 1 {
		return false
	}
	eq := c.Content[0]
	if eq.Tag != "!Equals" || len(eq.Content) != 2 {
		return false
	}
	ref, zero := eq.Content[0], eq.Content[1]
	return ref.Tag == "!Ref" && ref.Value == param && zero.Value == "0"
}

// docs/sizing.md's tables show each default's arithmetic; the template's
// default, the page's result and the daemon's own rates must agree.
func TestSizingDefaultsAreTheSizingPagesArithmetic(t *testing.T) {
	page, err := os.ReadFile("docs/sizing.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(page)
	row := regexp.MustCompile("(?m)^\\| `([A-Za-z]+)` \\| [^|]+ \\| ([^|]+) \\|$")
	pageSays := map[string]float64{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		pageSays[m[1]] = arithmetic(t, m[1], strings.TrimSpace(m[2]))
	}
	p := parseTemplate(t)
	for name, want := range wantDefaults() {
		d := at(p.root, "Parameters", name, "Default")
		if d == nil {
			t.Errorf("template.yaml: %s has no default", name)
			continue
		}
		got, err := strconv.ParseFloat(d.Value, 64)
		if err != nil || !near(got, want) {
			t.Errorf("template.yaml: %s defaults to %s, the sizing formula gives %g", name, d.Value, want)
		}
		r, ok := pageSays[name]
		if !ok {
			t.Errorf("docs/sizing.md: no sizing row for %s", name)
		} else if !near(r, want) {
			t.Errorf("docs/sizing.md: %s's row comes to %g, the sizing formula gives %g", name, r, want)
		}
	}
}

// arithmetic checks "a op b op c = r" (left to right, + * /) and returns
// r; a cell that is a number and words ("300 (one per …)") is that number.
func arithmetic(t *testing.T, name, cell string) float64 {
	t.Helper()
	lhs, rhs, ok := strings.Cut(cell, " = ")
	if !ok {
		n, err := strconv.ParseFloat(strings.Fields(cell)[0], 64)
		if err != nil {
			t.Fatalf("docs/sizing.md: %s: %q is neither arithmetic nor a number", name, cell)
		}
		return n
	}
	result, err := strconv.ParseFloat(rhs, 64)
	if err != nil {
		t.Fatalf("docs/sizing.md: %s: result %q", name, rhs)
	}
	tok := strings.Fields(lhs)
	acc, err := strconv.ParseFloat(tok[0], 64)
	if err != nil || len(tok)%2 != 1 {
		t.Fatalf("docs/sizing.md: %s: %q", name, lhs)
	}
	for i := 1; i+1 < len(tok); i += 2 {
		v, err := strconv.ParseFloat(tok[i+1], 64)
		if err != nil {
			t.Fatalf("docs/sizing.md: %s: %q", name, lhs)
		}
		switch tok[i] {
		case "+":
			acc += v
		case "*":
			acc *= v
		case "/":
			acc /= v
		default:
			t.Fatalf("docs/sizing.md: %s: operator %q", name, tok[i])
		}
	}
	if !near(acc, result) {
		t.Errorf("docs/sizing.md: %s: %s is %g, not %g", name, lhs, acc, result)
	}
	return result
}

func near(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }

// The direct-lane site serves the same daemons the same way, so its
// throttle is the relay's daemon-plane limit, with the same defaults.
func TestSiteTemplateThrottlesAtTheDaemonPlanesLimit(t *testing.T) {
	var doc yaml.Node
	if err := yaml.Unmarshal(byorelay.SiteTemplate, &doc); err != nil {
		t.Fatal(err)
	}
	root := doc.Content[0]
	def := at(root, "Resources", "SiteApi", "Properties", "DefaultRouteSettings")
	want := wantDefaults()
	for key, param := range map[string]string{
		"ThrottlingRateLimit":  "DaemonRouteRateLimit",
		"ThrottlingBurstLimit": "DaemonRouteBurstLimit",
	} {
		if got := refOf(t, at(def, key)); got != param {
			t.Errorf("site-template.yaml: %s from %q, want %s", key, got, param)
		}
		d := at(root, "Parameters", param, "Default")
		if d == nil {
			t.Errorf("site-template.yaml: %s has no default", param)
			continue
		}
		if got, err := strconv.ParseFloat(d.Value, 64); err != nil || !near(got, want[param]) {
			t.Errorf("site-template.yaml: %s defaults to %s, want %g", param, d.Value, want[param])
		}
	}
	res := at(root, "Resources")
	for i := 0; i+1 < len(res.Content); i += 2 {
		ev := at(res.Content[i+1], "Properties", "Events")
		if ev == nil {
			continue
		}
		for j := 0; j+1 < len(ev.Content); j += 2 {
			if at(ev.Content[j+1], "Properties", "RouteSettings") != nil {
				t.Errorf("site-template.yaml: %s sets its own throttle; the test above would not see it", res.Content[i].Value)
			}
		}
	}
}
