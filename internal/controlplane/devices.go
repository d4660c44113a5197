package controlplane

import (
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// Pairing is a pending pairing as a person approving it needs to see it:
// what the machine calls itself and the fingerprint of the key they are
// about to approve, to compare with what the daemon printed.
type Pairing struct {
	UserCode    string                  `json:"userCode"`
	Fingerprint string                  `json:"fingerprint"`
	Device      protocol.PublicIdentity `json:"device"`
	Label       string                  `json:"label"`
	Platform    string                  `json:"platform"`
	// DaemonVersion is what the daemon said it runs; absent on codes
	// stored before the relay kept it.
	DaemonVersion string                `json:"daemonVersion,omitempty"`
	Capabilities  []protocol.Capability `json:"capabilities"`
	ExpiresAt     int64                 `json:"expiresAt"`
	// ApprovedAs is the runner id the key was approved as, when it was:
	// the code stays pending until the daemon's next poll spends it, and
	// a page must not offer to approve it twice.
	ApprovedAs string `json:"approvedAs,omitempty"`
}

// PendingPairing finds the live pairing a person's user code names.
func (a *Admin) PendingPairing(ctx context.Context, userCode string) (Pairing, error) {
	p, err := a.pending(ctx, userCode)
	if err != nil {
		return Pairing{}, err
	}
	shownPairing, err := shown(p)
	if err != nil {
		return Pairing{}, err
	}
	list := []Pairing{shownPairing}
	if err := a.markApproved(ctx, list); err != nil {
		return Pairing{}, err
	}
	return list[0], nil
}

// markApproved fills in ApprovedAs from the devices with each key.
func (a *Admin) markApproved(ctx context.Context, list []Pairing) error {
	keys := make([]string, 0, len(list))
	for _, p := range list {
		keys = append(keys, identityKey(p.Device.Identity))
	}
	got, err := a.store.storage.Read(ctx, keys)
	if err != nil {
		return err
	}
	for i := range list {
		for _, d := range fixtureOf(got[identityKey(list[i].Device.Identity)].records).Devices {
			if d.Device.Identity == list[i].Device.Identity && !isRevoked(d) {
				list[i].ApprovedAs = d.RunnerID
				break
			}
		}
	}
	return nil
}

// shown is a pending pairing as a person sees it.
func shown(p store.PendingPairing) (Pairing, error) {
	fingerprint, err := protocol.KeyID(p.Device.Identity)
	if err != nil {
		return Pairing{}, invalid("the pending device key is not a key: %v", err)
	}
	caps := p.Capabilities
	if caps == nil {
		caps = []protocol.Capability{}
	}
	return Pairing{
		UserCode: p.UserCode, Fingerprint: fingerprint, Device: p.Device,
		Label: p.Label, Platform: p.Platform, DaemonVersion: p.DaemonVersion,
		Capabilities: caps, ExpiresAt: p.ExpiresAt,
	}, nil
}

// MaxListedPairings is how many pending pairings one list shows. Honest
// use is a handful at a time; the bound keeps a list's cost and size
// fixed when somebody floods pairing (each pending pairing may carry up
// to store.MaxCapabilityBytes of capabilities, and a deployed answer must
// fit a Lambda response). A pairing past the bound is still found by its
// code.
const MaxListedPairings = 20

// PendingPairings lists the live pending pairings, newest first, at most
// MaxListedPairings of them, so an operator can approve one with a click
// instead of typing the code from the daemon's terminal. Nothing listed
// carries a device code: that is the daemon's secret, and the user code
// is what approve and deny take.
//
// Listing gives up one thing the typed code gave: the code tied the person
// at the browser to the machine. The list shows each pairing's key
// fingerprint, which the daemon printed beside its code; the operator
// approves the one whose fingerprint matches, as they would after typing.
func (a *Admin) PendingPairings(ctx context.Context) (PendingPairingsResponse, error) {
	if a.pairings == nil {
		return PendingPairingsResponse{}, noPairings
	}
	// One more than shown says whether there are more.
	list, err := a.pairings.ListPairings(ctx, MaxListedPairings+1)
	if err != nil {
		return PendingPairingsResponse{}, err
	}
	out := PendingPairingsResponse{Pairings: []Pairing{}, Now: clock.EpochMs(a.clock.Now())}
	if len(list) > MaxListedPairings {
		list, out.More = list[:MaxListedPairings], true
	}
	for _, p := range list {
		shownPairing, err := shown(p)
		if err != nil {
			return PendingPairingsResponse{}, err
		}
		out.Pairings = append(out.Pairings, shownPairing)
	}
	if err := a.markApproved(ctx, out.Pairings); err != nil {
		return PendingPairingsResponse{}, err
	}
	return out, nil
}

// noPairings refuses every pairing call of a control plane that was given
// no pairing store.
var noPairings = &Error{Status: http.StatusNotImplemented, Code: "not-implemented", Message: "this control plane was given no pairing codes to approve"}

// maxUserCodeBytes leaves room for white space around a typed code.
const maxUserCodeBytes = 64

func (a *Admin) pending(ctx context.Context, userCode string) (store.PendingPairing, error) {
	if a.pairings == nil {
		return store.PendingPairing{}, noPairings
	}
	if strings.TrimSpace(userCode) == "" {
		return store.PendingPairing{}, invalid("userCode must not be empty")
	}
	// A code is nine characters (XXXX-XXXX); one that is not short cannot
	// be one, and must not reach a table key.
	if err := withinBound("userCode", userCode, maxUserCodeBytes); err != nil {
		return store.PendingPairing{}, err
	}
	p, ok, err := a.pairings.PairingByUserCode(ctx, userCode)
	if err != nil {
		return store.PendingPairing{}, err
	}
	if !ok {
		// Unknown and expired read the same, as they do to the daemon.
		return store.PendingPairing{}, notFound("no pending pairing has user code %q (unknown or expired)", userCode)
	}
	return p, nil
}

// DenyPairing refuses the pending pairing a user code names: the code is
// dropped, so it can be neither approved nor polled again. The daemon's
// next poll reads "expired", not "denied": the reference relay never
// answers "denied", and a daemon that sees the same words from both relays
// tells its person the same thing (ask again). Nothing in the projection
// changes; a denied machine may ask to pair again.
func (a *Admin) DenyPairing(ctx context.Context, userCode string) (Pairing, error) {
	p, err := a.pending(ctx, userCode)
	if err != nil {
		return Pairing{}, err
	}
	denied, err := shown(p)
	if err != nil {
		return Pairing{}, err
	}
	if err := a.pairings.DropPairing(ctx, p.DeviceCode); err != nil {
		return Pairing{}, err
	}
	a.log.InfoContext(ctx, "pairing denied", "device", denied.Fingerprint, "label", denied.Label)
	return denied, nil
}

// Approval is what approving a pairing wrote.
type Approval struct {
	Device   projection.DeviceRecord
	Label    string
	Platform string
}

// ApprovePairing approves the pending pairing a user code names: the device
// whose keys the daemon presented becomes owner's, under runnerID (a fresh
// runner_<uuid> when empty; the device never chooses it). The daemon's next
// poll finds the DeviceRecord and is approved; the relay, not this, drops
// the code then, so it stays single use.
//
// A key already approved and not revoked is refused rather than re-owned:
// changing a machine's owner is a revocation and a new pairing. A key whose
// device was revoked may pair again; the new record goes before the old
// one, because the relay's pairing poll takes the first record with the key
// and the old runner id must stay revoked.
func (a *Admin) ApprovePairing(ctx context.Context, userCode, owner, runnerID string) (Approval, int64, error) {
	if owner == "" {
		return Approval{}, 0, invalid("owner must not be empty")
	}
	if err := withinBound("owner", owner, store.MaxOwnerBytes); err != nil {
		return Approval{}, 0, err
	}
	if err := withinBound("runnerId", runnerID, store.MaxRunnerIDBytes); err != nil {
		return Approval{}, 0, err
	}
	p, err := a.pending(ctx, userCode)
	if err != nil {
		return Approval{}, 0, err
	}
	if !protocol.VerifyPublicIdentity(p.Device) {
		return Approval{}, 0, invalid("the pending device's encryption key is not signed by its identity key")
	}
	if runnerID == "" {
		runnerID = "runner_" + store.NewLeaseID()
	}
	record := projection.DeviceRecord{Owner: owner, RunnerID: runnerID, Device: p.Device}
	version, err := a.store.update(ctx, []string{deviceKey(runnerID), identityKey(p.Device.Identity), ownerDevicesKey(owner)}, func(f *projection.Fixture) error {
		if slices.ContainsFunc(f.Devices, func(d projection.DeviceRecord) bool { return d.RunnerID == runnerID }) {
			return conflict("runner id %q is already taken", runnerID)
		}
		if n := countFunc(f.Devices, func(d projection.DeviceRecord) bool { return d.Owner == owner }); n >= MaxOwnerDevices {
			return conflict("%q has %d device records, the most one owner may hold", owner, n)
		}
		at := slices.IndexFunc(f.Devices, func(d projection.DeviceRecord) bool { return d.Device.Identity == p.Device.Identity })
		if at < 0 {
			f.Devices = append(f.Devices, record)
			return nil
		}
		for _, d := range f.Devices[at:] {
			if d.Device.Identity == p.Device.Identity && !isRevoked(d) {
				return conflict("this device is already approved, as runner %q of %q", d.RunnerID, d.Owner)
			}
		}
		f.Devices = slices.Insert(slices.Clone(f.Devices), at, record)
		return nil
	})
	if err != nil {
		return Approval{}, 0, err
	}
	fingerprint, _ := protocol.KeyID(p.Device.Identity)
	a.log.InfoContext(ctx, "pairing approved", "runner", runnerID, "owner", owner,
		"device", fingerprint, "label", p.Label, "version", version)
	return Approval{Device: record, Label: p.Label, Platform: p.Platform}, version, nil
}

// RevokeDevice marks a device revoked: every daemon-plane call signed as
// that runner is refused from the next request on. The record stays, so the
// runner id cannot be rebuilt from presence or reused. Revoking a revoked
// device changes nothing and is not an error.
func (a *Admin) RevokeDevice(ctx context.Context, runnerID string) (projection.DeviceRecord, int64, error) {
	if runnerID == "" {
		return projection.DeviceRecord{}, 0, invalid("runnerId must not be empty")
	}
	var record projection.DeviceRecord
	version, err := a.store.update(ctx, []string{deviceKey(runnerID)}, func(f *projection.Fixture) error {
		found := false
		f.Devices = slices.Clone(f.Devices)
		// Every record with the id, not only the first the relay reads: a
		// duplicate left unrevoked would come back if the first were removed.
		for i, d := range f.Devices {
			if d.RunnerID != runnerID {
				continue
			}
			yes := true
			d.Revoked = &yes
			f.Devices[i] = d
			if !found {
				record, found = d, true
			}
		}
		if !found {
			return notFound("no device has runner id %q", runnerID)
		}
		return nil
	})
	if err != nil {
		return projection.DeviceRecord{}, 0, err
	}
	a.log.InfoContext(ctx, "device revoked", "runner", runnerID, "owner", record.Owner, "version", version)
	return record, version, nil
}

func isRevoked(d projection.DeviceRecord) bool { return d.Revoked != nil && *d.Revoked }

func countFunc[T any](list []T, match func(T) bool) int {
	n := 0
	for _, x := range list {
		if match(x) {
			n++
		}
	}
	return n
}
