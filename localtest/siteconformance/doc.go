// Package siteconformance runs the published conformance kit,
// @byollm/conformance 0.1.1 (byollm-certify, 32 checks), against the Go
// direct-lane server (siteserver) over real HTTP on loopback: once over the
// memory store on a plain net/http server, once over DynamoDB Local through
// the local API server that stands in for API Gateway and Lambda. The
// target (target.mjs) imports nothing of @byollm/server; its setup hooks
// are POSTs to the server's test-only admin listener.
package siteconformance
