package protocol

import (
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
)

// ProtocolVersion is the version every request declares.
const ProtocolVersion = "2"

// SupportedProtocolVersions lists what this build serves, oldest first. "0"
// and "1" are deliberately absent: their vocabularies are incompatible, and
// accepting the version would only move the refusal down to a schema error
// that names nothing.
var SupportedProtocolVersions = []string{ProtocolVersion}

// MinProtocolVersion is derived from the list, so the two cannot disagree.
var MinProtocolVersion = SupportedProtocolVersions[0]

// UpgradeCommand is what refusals tell a daemon's owner to run.
const UpgradeCommand = "npm i -g byollm@latest"

// CheckVersion is the protocol version handshake: it runs first on every
// /byollm/ and /relay/ path, before signature and schema, and answers nil to
// proceed or the refusal to serve with status 400.
//
// The version is the body's own top-level "protocolVersion" key when the
// body parses as a JSON object holding that key (whatever its value, even
// null), else the query's first "protocolVersion". Pass a nil body for
// anything but a POST: the reference reads no body on a GET. A missing, non-string or
// empty version is refused the same way as an unsupported one, because a
// mismatch that surfaces as a generic bad-request names nothing a user can
// act on.
func CheckVersion(rawBody []byte, query url.Values) *WireError {
	declared, ok := declaredVersion(rawBody, query)
	return versionDecision(declared, ok)
}

// versionDecision is CheckVersion's answer to what the request declared.
func versionDecision(declared any, ok bool) *WireError {
	s, isString := declared.(string)
	if !ok || !isString || s == "" {
		return versionRefusal("this request declared no protocol version. Upgrade the daemon: `" +
			UpgradeCommand + "`.")
	}
	for _, v := range SupportedProtocolVersions {
		if v == s {
			return nil
		}
	}
	advice := "This daemon is newer than the server; the server needs upgrading."
	if JSLess(s, MinProtocolVersion) {
		advice = "Upgrade the daemon: `" + UpgradeCommand + "`."
	}
	return versionRefusal("this server speaks protocol " + strings.Join(SupportedProtocolVersions, ", ") +
		" and the daemon asked for " + s + ". " + advice)
}

func versionRefusal(message string) *WireError {
	return &WireError{
		Error:     CodeUnsupportedProtocolVersion,
		Message:   message,
		Supported: append([]string(nil), SupportedProtocolVersions...),
		Minimum:   MinProtocolVersion,
	}
}

// declaredVersion returns the declared value (a string, or any other JSON
// value from the body) and whether one was declared at all.
func declaredVersion(rawBody []byte, query url.Values) (any, bool) {
	// Shallow: only the root's own protocolVersion is read, so nothing
	// else of a 6 MiB body is built just to be thrown away.
	p := jsonParser{data: BodyText(rawBody), shallow: true}
	root, err := p.parse()
	return declaredIn(root, err, query)
}

// declaredIn is declaredVersion on a body already parsed (err is the
// parse's), deep or shallow: it reads only the root's own protocolVersion.
func declaredIn(root node, err error, query url.Values) (any, bool) {
	if err == nil && root.kind == kindObject {
		if m, found := root.member("protocolVersion"); found {
			return m.plain(), true
		}
	}
	if vs, found := query["protocolVersion"]; found && len(vs) > 0 {
		return vs[0], true
	}
	return nil, false
}

// JSLess is JS's `a < b` on strings: UTF-16 code unit order, which differs
// from Go's byte order for characters above U+FFFF. Where the protocol
// compares or sorts strings (the version floor, the fixture's site order) it
// is this order, or a Go peer and a JS peer disagree on non-BMP ids.
func JSLess(a, b string) bool {
	x, y := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	for i := 0; i < len(x) && i < len(y); i++ {
		if x[i] != y[i] {
			return x[i] < y[i]
		}
	}
	return len(x) < len(y)
}

// semverPattern and exactOfferPattern are compiled on first use, not at package initialisation:
// every relay and site function imports this package, and compiling both
// was most of its init at every cold start.
var semverPattern = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$`)
})

type semver struct {
	release [3]float64
	// pre holds float64 for numeric identifiers and string otherwise.
	pre []any
}

func parseSemver(v string) (semver, bool) {
	m := semverPattern().FindStringSubmatch(v)
	if m == nil {
		return semver{}, false
	}
	var s semver
	for i := range 3 {
		// Number() in the reference: huge components become large floats
		// rather than errors, and compare as such.
		s.release[i], _ = strconv.ParseFloat(m[i+1], 64)
	}
	if m[4] != "" {
		for _, part := range strings.Split(m[4], ".") {
			if isDigits(part) {
				n, _ := strconv.ParseFloat(part, 64)
				s.pre = append(s.pre, n)
			} else {
				s.pre = append(s.pre, part)
			}
		}
	}
	return s, true
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// CompareVersions orders two daemon versions as the reference relay does:
// semver with prereleases, -1/0/1, and ok false when either cannot be
// parsed.
func CompareVersions(a, b string) (order int, ok bool) {
	left, okA := parseSemver(a)
	right, okB := parseSemver(b)
	if !okA || !okB {
		return 0, false
	}
	for i := range 3 {
		if left.release[i] != right.release[i] {
			if left.release[i] < right.release[i] {
				return -1, true
			}
			return 1, true
		}
	}
	if len(left.pre) == 0 && len(right.pre) > 0 {
		return 1, true
	}
	if len(left.pre) > 0 && len(right.pre) == 0 {
		return -1, true
	}
	for i := 0; i < max(len(left.pre), len(right.pre)); i++ {
		if i >= len(left.pre) {
			return -1, true
		}
		if i >= len(right.pre) {
			return 1, true
		}
		l, r := left.pre[i], right.pre[i]
		if l == r {
			continue
		}
		ln, lNum := l.(float64)
		rn, rNum := r.(float64)
		switch {
		case lNum && rNum:
			if ln < rn {
				return -1, true
			}
			return 1, true
		case lNum:
			return -1, true
		case rNum:
			return 1, true
		}
		if l.(string) < r.(string) {
			return -1, true
		}
		return 1, true
	}
	return 0, true
}

// CheckDaemonFloor is the build floor on heartbeat (status 426). A version
// that cannot be parsed is never refused: the floor is a backstop to the
// auto-updater, not a gate on daemons we cannot read.
func CheckDaemonFloor(daemonVersion, floor string) *WireError {
	order, ok := CompareVersions(daemonVersion, floor)
	if !ok || order >= 0 {
		return nil
	}
	e := BelowFloorError("byollm "+daemonVersion+" is below the supported floor ("+floor+"). Run `"+
		UpgradeCommand+"`, then `byollm start`.", floor)
	return &e
}

// UpdateOfferSince is the first daemon version whose HeartbeatResponse
// schema knows updateTo; offering it to an older one would fail its strict
// parse.
const UpdateOfferSince = "0.1.0-alpha.83"

var exactOfferPattern = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$`)
})

// UpdateOfferFor is the updateTo a heartbeat response carries, or "" for
// none. offer "" means no offer configured.
func UpdateOfferFor(offer, daemonVersion string) string {
	if offer == "" || !exactOfferPattern().MatchString(offer) {
		return ""
	}
	order, ok := CompareVersions(daemonVersion, UpdateOfferSince)
	if !ok || order < 0 || daemonVersion == offer {
		return ""
	}
	return offer
}
