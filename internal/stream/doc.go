// Package stream is the frame model of a live token stream and the conform
// pass that makes any relay's output safe to show a reader.
//
// It ports the frame catalogue and StreamRelayConform of @rindle/api-server
// 0.10: six frame types, offsets counted in UTF-16 code units of the
// produced text, and a pure state machine that turns every way a relay can
// misbehave into a legal `stale`, never into corrupted text. Pure Go, no
// I/O: the relay's frame log, the sealing of deltas and the HTTP transports
// are built on top of it.
//
// Offsets are UTF-16 code units because that is rindle's (and the browser's)
// coordinate: a Go reader and a JavaScript reader must agree on what `seq`
// means for the same text. Use UTF16Len, never len, to measure text.
package stream
