// Package controlplane holds the relay's projection durably and changes it.
//
// The projection (sites with their keys and successions, approved devices,
// consents with pause, rosters, revocations) is stored one record at a
// time (records.go), each record in the partitions that find it: a device
// under its runner id and its identity key, an owner's consents,
// revocations and rosters under the owner, a site under its id and its key
// id. Order is kept where the reference's rules depend on it ("the first
// record that matches"), because those rules only ever compare records of
// one partition, and a partition lists its records in registry order.
//
// Store is the relay's ProjectionSource. Scoped reads the partitions that
// decide one request (projection.Fixture.Scope), strongly consistent and
// uncached, so a change made through any instance is in force on the very
// next request on every instance, and no item is read by every request.
// An admin change reads the partitions it decides on, applies its rule to
// their records, and writes the difference in one transaction conditioned
// on the version of every partition it read, re-applied when another
// change landed first.
//
// Storage is where the records live: DynamoStorage in the relay's table,
// MemoryStorage for tests and the local stack. legacy.go reads the layout
// before records (one document under "V#projection") to migrate it.
//
// Admin is the set of changes a control plane makes (import, register and
// rotate sites, approve pairings, revoke devices, consents, rosters), each
// checked in full before anything is written; a refusal is an *Error and
// changes nothing. An import is paged (imports.go). AdminHandler serves
// them under /admin as an HTTP JSON API, for the local server and for the
// admin Lambda behind an IAM-authorised route; Client calls it, and package
// admincli is the `byorelay admin` command line over Client.
//
// Wiring, in a relay function and in the admin function alike:
//
//	projections := controlplane.NewStore(controlplane.NewDynamoStorage(ddb, table))
//	relay.New(relay.Config{Projection: projections, ...})
//	admin := controlplane.NewAdmin(controlplane.AdminConfig{Store: projections, Pairings: routingStore})
//	handler := controlplane.AdminHandler(admin)
package controlplane
