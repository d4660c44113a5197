package store

import (
	"context"

	"github.com/byorelay/byorelay/protocol"
)

// PairingCodeTTLMs is how long a person has to walk to a browser and type
// eight characters.
const PairingCodeTTLMs = 10 * 60 * 1000

// MaxOutstandingPairings is how many pairings may be in flight at once across
// the whole relay. Anybody can ask to pair (a machine with no pairing has no
// credential), so without a ceiling a script could fill the shared store;
// five hundred at one instant is far above honest traffic and an attacker's
// first second. A refusal that resolves in ten minutes beats a relay that
// stops routing.
const MaxOutstandingPairings = 500

// PairingBusyMessage is what a caller is told when pairings are refused for
// load, whichever limit refused them.
const PairingBusyMessage = "too many pairings are in progress right now — try again in a few minutes"

// PendingPairing is what the relay remembers between a daemon's pairing
// start and its polls. A code grants nothing on its own: approval is a
// human in the control plane approving this keypair, and the poll asks the
// projection, not this record.
type PendingPairing struct {
	// DeviceCode is the secret the daemon polls with; never shown to a human.
	DeviceCode string
	// UserCode is the short code a person reads and types (XXXX-XXXX).
	UserCode string
	// Device is the keypair a human is about to approve.
	Device protocol.PublicIdentity
	// Capabilities is what the machine advertised when it asked to pair.
	Capabilities []protocol.Capability
	Label        string
	Platform     string
	// DaemonVersion is the version the daemon said it runs, shown to the
	// person approving it; empty on codes stored before it was kept.
	DaemonVersion string
	// ExpiresAt is epoch ms; from then on the code is gone, approved or not.
	ExpiresAt int64
}

// PutResult is what happened when a pending pairing was offered for storage.
type PutResult string

const (
	PutStored     PutResult = "stored"
	PutAtCapacity PutResult = "at-capacity"
)

// PairingCodes holds pending pairings. It lives beside the routing store
// because every replica must see the same codes: a code minted on one must
// be pollable on another, and the ceiling and the one-code-per-keypair rule
// must hold globally. Expiry is enforced on read against the store's clock.
type PairingCodes interface {
	// PutPairing stores p, in three steps in this order:
	//  1. every entry with ExpiresAt <= now is deleted, so the cap cannot
	//     latch after ten minutes of traffic;
	//  2. every entry for the same keypair (Device.Identity) is deleted, so
	//     a restarted pairing replaces its own code and the old device and
	//     user codes stop resolving;
	//  3. if the live entries number the capacity (MaxOutstandingPairings
	//     unless Options.PairingCapacity says otherwise), PutAtCapacity and
	//     nothing is stored; otherwise PutStored.
	PutPairing(ctx context.Context, p PendingPairing) (PutResult, error)
	// PairingByDeviceCode finds a live pairing (ExpiresAt > now) by the
	// daemon's secret.
	PairingByDeviceCode(ctx context.Context, deviceCode string) (PendingPairing, bool, error)
	// PairingByUserCode finds a live pairing by the code a human typed,
	// trimmed of surrounding white space and upper-cased first.
	PairingByUserCode(ctx context.Context, userCode string) (PendingPairing, bool, error)
	// ListPairings returns up to limit live pairings (ExpiresAt > now),
	// the most recently started first: latest ExpiresAt first (every code
	// lives PairingCodeTTLMs), ties by Device.Identity, descending. Each
	// comes with DeviceCode empty: the list is for a person choosing what
	// to approve, and the device code is the daemon's secret, which nobody
	// who reads the list needs. A limit <= 0 lists nothing.
	ListPairings(ctx context.Context, limit int) ([]PendingPairing, error)
	// DropPairing deletes a pairing after it succeeded, so a code is single
	// use. Dropping an unknown code is not an error.
	DropPairing(ctx context.Context, deviceCode string) error
	// TakeToken takes one token from the named bucket (Bucket.Take: at most
	// burst, one more every refillMs, by the store's clock): false, with
	// nothing taken, when it is empty. The relay throttles pairing with it,
	// per source address and per key, so one source cannot fill the
	// pairing ceiling for everybody; the buckets are shared by every
	// replica like the codes are. A bucket left alone refills, so an
	// implementation may forget one that has been full for a while.
	TakeToken(ctx context.Context, bucket string, burst, refillMs int64) (bool, error)
}
