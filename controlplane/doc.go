// Package controlplane holds the relay's projection durably and changes it.
//
// The projection (sites with their keys and successions, approved devices,
// consents with pause, rosters, revocations) is one versioned document: the
// whole RelayFixture as JSON. One document rather than an item per record
// because the reference's rules (first match wins, registry order,
// revocation shadowing consent) are rules over the ordered lists, and the
// relay needs all of it on every claim anyway.
//
// Store is the relay's ProjectionSource: every Projection call reads the
// version (one small strongly consistent read) and reloads the document only
// when it changed, so a change made through any instance is in force on the
// very next request on every instance. Store.Update is a read-modify-write
// of the whole document, conditional on the version it read, re-applied to
// the fresh document when another change landed first.
//
// Storage is where the document lives: DynamoStorage in the relay's table
// (partition "V#projection", chunked past one item's 400 KB, bounded at
// about 3.5 MB), MemoryStorage for tests and the local stack.
//
// Admin is the set of changes a control plane makes (import, register and
// rotate sites, approve pairings, revoke devices, consents, rosters), each
// checked in full before anything is written; a refusal is an *Error and
// changes nothing. AdminHandler serves them under /admin as an HTTP JSON
// API, for the local server and for the admin Lambda behind an
// IAM-authorised route; Client calls it, and package admincli is the
// `byorelay admin` command line over Client.
//
// Wiring, in a relay function and in the admin function alike:
//
//	projections := controlplane.NewStore(controlplane.NewDynamoStorage(ddb, table))
//	relay.New(relay.Config{Projection: projections, ...})
//	admin := controlplane.NewAdmin(controlplane.AdminConfig{Store: projections, Pairings: routingStore})
//	handler := controlplane.AdminHandler(admin)
package controlplane
