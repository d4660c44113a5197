package relay

import (
	"testing"

	"github.com/byorelay/byorelay/protocol"
)

func TestParseViewerAddressReadsWhatCloudFrontWrites(t *testing.T) {
	for _, tc := range []struct {
		value, want string
	}{
		{"198.51.100.10:46532", "198.51.100.10"},
		{"2001:db8:85a3::8a2e:370:7334:46532", "2001:db8:85a3::8a2e:370:7334"},
		{"2001:0db8:85a3:0000:0000:8a2e:0370:7334:443", "2001:db8:85a3::8a2e:370:7334"},
		{"::1:443", "::1"},
		{"[2001:db8::1]:443", "2001:db8::1"},
		{"::ffff:198.51.100.10:443", "198.51.100.10"},
		{"198.51.100.10:0", "198.51.100.10"},
		{"198.51.100.10:65535", "198.51.100.10"},
	} {
		addr, ok := parseViewerAddress([]string{tc.value})
		if !ok || addr.String() != tc.want {
			t.Errorf("%q: %v %v, want %s", tc.value, addr, ok, tc.want)
		}
	}
	for _, bad := range []string{"", ":", ":443", "198.51.100.10", "198.51.100.10:", "198.51.100.10:65536",
		"198.51.100.10:123456", "198.51.100.10:-1", "198.51.100.10:+1", "[198.51.100.10]:443", "[2001:db8::1:443",
		"2001:db8::1]:443", "fe80::1%eth0:443", "2001:db8::", "host:443", "198.51.100.10:443,198.51.100.11:443"} {
		if addr, ok := parseViewerAddress([]string{bad}); ok {
			t.Errorf("%q read as %v", bad, addr)
		}
	}
	if _, ok := parseViewerAddress(nil); ok {
		t.Error("no value read as an address")
	}
	if _, ok := parseViewerAddress([]string{"198.51.100.10:1", "198.51.100.10:1"}); ok {
		t.Error("two values read as an address")
	}
}

func TestSourceBucketCountsIPv6ByItsSlash64(t *testing.T) {
	for address, want := range map[string]string{
		"192.0.2.1":               "192.0.2.1",
		"::ffff:192.0.2.1":        "192.0.2.1",
		"2001:db8:1:2:3:4:5:6":    "2001:db8:1:2::/64",
		"2001:db8:1:2::ffff":      "2001:db8:1:2::/64",
		"fe80::1%eth0":            "fe80::/64",
		"not an address":          "not an address",
		"2001:db8:1:3:0:0:0:0001": "2001:db8:1:3::/64",
	} {
		if got := sourceBucket(address); got != want {
			t.Errorf("%q: bucket %q, want %q", address, got, want)
		}
	}
}

// A results answer keeps rows while their sizes fit the byte bound, and
// always its first row.
func TestWithinBytes(t *testing.T) {
	rows := []protocol.Encoded{protocol.Encoded("aaaa"), protocol.Encoded("bbbb"), protocol.Encoded("cc")}
	for _, c := range []struct{ limit, want int }{{0, 1}, {3, 1}, {8, 2}, {9, 2}, {10, 3}, {100, 3}} {
		if got := len(withinBytes(rows, c.limit)); got != c.want {
			t.Errorf("limit %d: %d rows, want %d", c.limit, got, c.want)
		}
	}
}
