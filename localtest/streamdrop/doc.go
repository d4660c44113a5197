// Package streamdrop is the browser test of dropped connections on the
// live stream lane (docs/streaming.md): two site processes (the test
// binary re-executed, BYORELAY_STREAMDROP_ROLE) share one site table on
// DynamoDB Local; one seals and pumps a streaming job, the other, which
// never seals anything, serves the page and the job's stream
// (siteserver's StreamHandler). The job runs on a Go daemon whose echo
// backend drips a word at a time, through byorelay's relay on its own
// DynamoDB Local table. A headless Chromium reads the stream through a
// TCP proxy that closes the connection from the server side after a byte
// budget, twice; EventSource reconnects with Last-Event-ID by itself, and
// the page's text must end equal to the result, character for character.
// Then, with the relay's frames gone, a fresh page is sent the
// checkpointed text and then the result.
//
// Beside it, the lane's measurement (docs/streaming.md): time to first
// text at a site reader against the backend's own first token, and the
// checkpoint's write units per 1,000 characters, in one run.
package streamdrop
