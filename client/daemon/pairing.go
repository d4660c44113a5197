package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"sort"
	"unicode/utf8"

	"github.com/byorelay/byorelay/protocol"
)

// Pairing is what a device holds after a person approved it: who it is at the
// relay, whose it is, and the site keys it pinned.
type Pairing struct {
	RunnerID   string `json:"runnerId"`
	Owner      string `json:"owner"`
	OwnerLabel string `json:"ownerLabel,omitempty"`
	// Sites are the sites served now, by key id, as last pinned.
	Sites map[string]protocol.PublicIdentity `json:"sites"`
	// Known is every site ever approved here, with the key it was approved
	// under. It outlives consent, so a site dropped and re-offered with a
	// different key is still refused.
	Known map[string]protocol.PublicIdentity `json:"known"`
	// ControlPlanePublic is the grant-signing key pinned at pairing. With
	// it, every relayed job must carry a grant it signed; without it the
	// device runs only its owner's work.
	ControlPlanePublic string `json:"controlPlanePublic,omitempty"`
	PairedAt           int64  `json:"pairedAt"`
}

func (p Pairing) clone() Pairing {
	p.Sites = maps.Clone(p.Sites)
	p.Known = maps.Clone(p.Known)
	if p.Sites == nil {
		p.Sites = map[string]protocol.PublicIdentity{}
	}
	if p.Known == nil {
		p.Known = map[string]protocol.PublicIdentity{}
	}
	return p
}

// PairCode is what a person needs to approve this device.
type PairCode struct {
	UserCode        string
	VerificationURL string
	ExpiresAt       int64
}

// ErrPairingDenied and ErrPairingExpired end a pairing attempt.
var (
	ErrPairingDenied  = errors.New("daemon: the pairing request was declined")
	ErrPairingExpired = errors.New("daemon: the pairing code expired before it was approved")
)

// Pair runs the device-code flow: start a pairing, show the
// user code through onCode, poll until a person approves it on the control
// plane, then pin the sites the relay hands over. No keys change hands
// before approval. On success the daemon holds the pairing (Pairing()
// returns it for saving).
func (d *Daemon) Pair(ctx context.Context, label string, onCode func(PairCode)) (Pairing, error) {
	if n := utf8.RuneCountInString(label); n < 1 || n > protocol.MaxLabelLength {
		return Pairing{}, fmt.Errorf("daemon: a label is 1 to %d characters, got %d", protocol.MaxLabelLength, n)
	}
	var started protocol.PairStartResponse
	err := d.post(ctx, "pair", protocol.PairStartRequest{
		ProtocolVersion: protocol.ProtocolVersion, Action: "start",
		Daemon:       protocol.DaemonInfo{Version: d.version, Label: label, Platform: platform()},
		Device:       d.keys.Public(),
		Capabilities: d.capabilities,
	}, &started, false)
	if err != nil {
		return Pairing{}, err
	}
	onCode(PairCode{UserCode: started.UserCode, VerificationURL: started.VerificationURL, ExpiresAt: started.ExpiresAt})

	for {
		if d.now() >= started.ExpiresAt {
			return Pairing{}, ErrPairingExpired
		}
		if err := d.sleep(ctx, msDuration(started.PollIntervalMs)); err != nil {
			return Pairing{}, err
		}
		var polled protocol.PairPollResponse
		err := d.post(ctx, "pair", protocol.PairPollRequest{
			ProtocolVersion: protocol.ProtocolVersion, Action: "poll", DeviceCode: started.DeviceCode,
		}, &polled, false)
		var ce *CallError
		if errors.As(err, &ce) && ce.Retryable() {
			continue
		}
		if err != nil {
			return Pairing{}, err
		}
		switch polled.Status {
		case protocol.PairPending:
			continue
		case protocol.PairDenied:
			return Pairing{}, ErrPairingDenied
		case protocol.PairExpired:
			return Pairing{}, ErrPairingExpired
		}
		// Approved. An app whose encryption key is not signed by its own
		// identity is refused outright, and nothing is paired.
		for _, e := range polled.Sites {
			if !protocol.VerifyPublicIdentity(e.Value) {
				return Pairing{}, fmt.Errorf("%w: site %s presented keys that do not verify", ErrPairingDenied, e.Key)
			}
		}
		p := Pairing{
			RunnerID: polled.RunnerID, Owner: polled.Owner,
			ControlPlanePublic: polled.ControlPlanePublic, PairedAt: d.now(),
			Sites: map[string]protocol.PublicIdentity{}, Known: map[string]protocol.PublicIdentity{},
		}
		if polled.OwnerLabel != nil {
			p.OwnerLabel = *polled.OwnerLabel
		}
		d.mu.Lock()
		d.pairing = p
		d.revoked = false
		d.mu.Unlock()
		d.applySites(polled.Sites, nil)
		d.emit(Event{Type: EventPaired, Detail: fmt.Sprintf("runner %s, owner %s, %d site(s)", p.RunnerID, p.Owner, len(polled.Sites))})
		return d.Pairing(), nil
	}
}

// applySites takes the relay's account of the served sites. Each entry must
// verify and be filed under its own key id. A first sighting is pinned; a
// known id with the same key stays pinned; a known id whose key changed is
// refused (pinning exists to refuse exactly that) unless a verified succession
// from an approved key vouches for the new one. A pinned site missing from the
// set stops being served, and its running jobs stop, unless it is a superseded
// key inside its retirement window.
func (d *Daemon) applySites(sites protocol.Record[protocol.PublicIdentity], successions protocol.Record[protocol.SiteSuccession]) {
	now := d.now()
	var events []Event
	d.mu.Lock()
	offered := map[string]bool{}
	for _, e := range sites {
		id, identity := e.Key, e.Value
		offered[id] = true
		if !protocol.VerifyPublicIdentity(identity) {
			events = append(events, Event{Type: EventSiteRefused, Site: id, Detail: "its encryption key is not signed by the identity presenting it"})
			continue
		}
		if kid, err := protocol.KeyID(identity.Identity); err != nil || kid != id {
			events = append(events, Event{Type: EventSiteRefused, Site: id, Detail: "the id it is filed under is not its key id"})
			continue
		}
		approved, known := d.pairing.Known[id]
		if !known {
			if ev, handled := d.rotateInto(id, identity, successions, now); handled {
				events = append(events, ev)
				continue
			}
			d.pairing.Known[id] = identity
			d.pairing.Sites[id] = identity
			events = append(events, Event{Type: EventSitePinned, Site: id})
			continue
		}
		if approved != identity {
			events = append(events, Event{Type: EventSiteRefused, Site: id, Detail: "its key changed under an id this device already pinned"})
			continue
		}
		d.pairing.Sites[id] = approved
	}
	for id := range d.pairing.Sites {
		if offered[id] {
			continue
		}
		if until, ok := d.retiring[id]; ok && now < until {
			continue
		}
		delete(d.retiring, id)
		delete(d.pairing.Sites, id)
		events = append(events, Event{Type: EventSiteDropped, Site: id})
		for _, h := range d.active {
			if h.site == id {
				h.cancel(errSiteWithdrawn)
			}
		}
	}
	d.mu.Unlock()
	for _, e := range events {
		d.emit(e)
	}
}

// rotateInto accepts a new site key whose succession chain reaches a key
// this device already approved. handled is true when the id
// was adopted, or when the chain is broken (the existing pins stay and the
// offer is refused); false sends the caller down the first-sighting path.
// Called with d.mu held.
func (d *Daemon) rotateInto(id string, identity protocol.PublicIdentity, successions protocol.Record[protocol.SiteSuccession], now int64) (Event, bool) {
	offered, ok := successions.Get(id)
	if !ok || len(offered.Succeeds) == 0 {
		return Event{}, false
	}
	walk := protocol.WalkSuccession(id, offered.Succeeds, func(k string) bool {
		_, ok := d.pairing.Known[k]
		return ok
	})
	switch walk.Failure {
	case protocol.SuccessionBrokenLink, protocol.SuccessionTooLong:
		return Event{Type: EventSiteRefused, Site: id, Detail: "its succession chain does not verify (" + string(walk.Failure) + ")"}, true
	}
	if walk.From == "" {
		return Event{}, false
	}
	d.pairing.Known[id] = identity
	d.pairing.Sites[id] = identity
	// The predecessor stays pinned for the window, so work already signed
	// under it still verifies; clamped, because the relay may retire a key
	// sooner than the protocol's window, never later.
	ceiling := now + protocol.RetirementWindowMs
	until := ceiling
	if offered.RetiringUntil != 0 && offered.RetiringUntil < ceiling {
		until = offered.RetiringUntil
	}
	d.retiring[walk.From] = until
	return Event{Type: EventSiteRotated, Site: id, Detail: "succeeds " + walk.From}, true
}

// ServedSites is the sorted key ids this device serves now.
func (d *Daemon) ServedSites() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	ids := make([]string, 0, len(d.pairing.Sites))
	for id := range d.pairing.Sites {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func platform() string {
	switch runtime.GOOS {
	case "darwin":
		return "darwin"
	case "windows":
		return "win32"
	default:
		return "linux"
	}
}
