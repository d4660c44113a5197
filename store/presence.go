package store

import "github.com/byorelay/byorelay/protocol"

// Presence is a device the relay has seen. It is a cache: a store may lose a
// record (a TTL, a restart) and the relay rebuilds it from the projection.
type Presence struct {
	RunnerID string
	Owner    string
	Device   protocol.PublicIdentity
	// LastSeenAt is stamped by the store's clock on every Seen.
	LastSeenAt int64
	// Capabilities is what the machine last said it can run. Empty (not
	// nil) is a real answer: a paired machine with no healthy backend.
	Capabilities []protocol.Capability
	// Withheld are kinds the machine deliberately does not advertise because
	// two services answer them and the owner has not chosen. Empty is the
	// normal answer.
	Withheld []protocol.WithheldKind
}

// Sighting is what a caller reports to Seen; the store stamps the time.
type Sighting struct {
	RunnerID     string
	Owner        string
	Device       protocol.PublicIdentity
	Capabilities []protocol.Capability
	Withheld     []protocol.WithheldKind
}
