// Package peers drives byorelay's real, unmodified peers from npm: the
// byollm 0.1.1 daemon and the @byollm/server 0.1.1 site on its relay lane.
// Each peer runs as a short Node script in this directory (daemon.mjs,
// site.mjs), printing one JSON event per line; the Go side starts it,
// reads its events and makes the assertions. ref-relay.mjs serves the
// reference relay, @byollm/relay 0.1.1, so the same scenarios can run
// against the behaviour byorelay copies.
//
// The npm packages are installed in localtest/js by `npm ci` (.ci/run does
// it). Without node or those packages a test fails when CI is set, and
// skips otherwise. docs/peers.md says what the peers needed that the
// reference documents do not.
package peers
