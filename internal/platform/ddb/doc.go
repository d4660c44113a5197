// Package ddb is what both stacks' DynamoDB stores share and neither
// owns: the client interface a store calls (API, so tests can wrap it
// with faults and a Meter), the capacity meter, the table helpers their
// CreateTable functions build from, and the ServerClock, the host clock
// corrected by the Date of DynamoDB's responses. It holds no item layout:
// each store's table is its own.
package ddb
