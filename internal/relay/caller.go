package relay

import (
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// ViewerAddressHeader is the viewer's address as CloudFront saw it, "ip:port"
// (an IPv6 address unbracketed, "2001:db8::1:443"), which CloudFront adds to
// an origin request when the origin request policy names it (template.yaml,
// EdgeOriginRequests).
const ViewerAddressHeader = "CloudFront-Viewer-Address"

// callerAddress is the one place that decides whose address a request came
// from: what the pairing throttle counts by
// (docs/decisions/0009-pairing-throttle.md). It is asked only of a request the origin lock admitted.
//
// Without an origin lock the answer is the front end's source address and
// nothing else: anyone can send a CloudFront-Viewer-Address header, and
// trusting it would let a client pick its own bucket (a fresh one for
// every start, or somebody else's to drain). With a lock, the request came
// through the edge, which sets the header itself, and the source address is
// one of CloudFront's egress addresses, shared by every viewer the same
// edge server forwards; the header's address is the viewer's. A missing or
// malformed header falls back to the source address, so a header the edge
// did not set as one well-formed value can only put its sender in the
// edge's shared bucket, never in a bucket of its choosing.
func (r *Relay) callerAddress(sourceIP string, header http.Header) string {
	if r.cfg.OriginSecrets == nil {
		return sourceIP
	}
	if viewer, ok := parseViewerAddress(header.Values(ViewerAddressHeader)); ok {
		return viewer.String()
	}
	return sourceIP
}

// parseViewerAddress reads the one value of CloudFront-Viewer-Address:
// an address, a colon and a decimal port. CloudFront writes an IPv6
// address unbracketed, so the port is what follows the last colon; the
// bracketed form is accepted too. Anything else (no port, a port out of
// range, a zone, two values, API Gateway's comma-joined repeats) is not an
// address. An IPv4-mapped IPv6 address is its IPv4 address, so one viewer
// has one spelling.
func parseViewerAddress(values []string) (netip.Addr, bool) {
	if len(values) != 1 {
		return netip.Addr{}, false
	}
	v := values[0]
	colon := strings.LastIndexByte(v, ':')
	if colon < 0 {
		return netip.Addr{}, false
	}
	host, port := v[:colon], v[colon+1:]
	if port == "" || len(port) > 5 || strings.TrimLeft(port, "0123456789") != "" {
		return netip.Addr{}, false
	}
	if n, err := strconv.Atoi(port); err != nil || n > 65535 {
		return netip.Addr{}, false
	}
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
		if !strings.Contains(host, ":") {
			return netip.Addr{}, false
		}
	}
	addr, err := netip.ParseAddr(host)
	if err != nil || addr.Zone() != "" {
		return netip.Addr{}, false
	}
	return addr.Unmap(), true
}
