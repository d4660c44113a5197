package controlplane

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// SlotVerdict is the answer to "can anything answer this person's (purpose,
// kind) at this site?", in the reference control plane's words: the
// relay's enqueue turns each into its wire answer.
type SlotVerdict string

const (
	SlotOK SlotVerdict = "ok"
	// SlotNotDeclared: the site does not declare the purpose.
	SlotNotDeclared SlotVerdict = "not-declared"
	// SlotUnmapped: the person has not chosen a service for the slot (or
	// has no standing consent, whose mappings would say).
	SlotUnmapped SlotVerdict = "unmapped"
	// SlotWaiting: mapped, but no live device of the mapped service's owner
	// advertises the service for the kind.
	SlotWaiting SlotVerdict = "waiting"
)

// PresenceLiveMs is how recently a device must have been seen for what it
// advertised to count. A daemon heartbeats every 10 s and calls itself
// stale after 60 s without an answer; a minute is the same bound, so a
// device that is merely between beats is live and one that went away is
// not for long.
const PresenceLiveMs = 60_000

// Presences is what the slot question reads of the routing store: the
// store's clock, which stamped each sighting, and one device's presence.
type Presences interface {
	Now(ctx context.Context) (int64, error)
	Presence(ctx context.Context, runnerID string) (store.Presence, bool, error)
}

// Slots answers the enqueue-time question from the projection and from
// presence.
type Slots struct {
	store    *Store
	presence Presences
}

// NewSlots returns the slot question over the projection s and the
// presence of the routing store p.
func NewSlots(s *Store, p Presences) *Slots { return &Slots{store: s, presence: p} }

// presenceParallel bounds the presence reads one question makes at once.
const presenceParallel = 8

// Satisfiable answers for one stub, in the reference's order: the site
// declares the purpose (the reserved one when the stub names none); the
// person mapped (purpose, kind); a live device of the mapped owner
// advertises the mapped service for the kind. site is the projection the
// enqueue read, which holds the site's record; nil reads it here.
//
// What it reads, beside that projection, and none of it shared by every
// request: one round of the person's partitions VO#<owner> (the consent
// and its mappings) and VOD#<owner> (their devices), in parallel; a second
// round of VOD#<mapped owner> when the mapping names somebody else's
// service; then the presence item P#<runnerId> of each of that owner's
// devices, at most MaxOwnerDevices, presenceParallel at a time, stopping
// at the first that advertises. An error from any read is returned, never
// turned into a verdict: a failed read is not a refusal.
func (sl *Slots) Satisfiable(ctx context.Context, site *projection.Projection, siteID, owner, purpose, kind string) (SlotVerdict, error) {
	purpose = slotPurpose(purpose)
	keys := []string{ownerKey(owner), ownerDevicesKey(owner)}
	if site == nil {
		keys = append(keys, siteKey(siteID))
	}
	f, err := sl.read(ctx, keys)
	if err != nil {
		return "", err
	}
	p, err := projection.New(f)
	if err != nil {
		return "", err
	}
	if site == nil {
		site = p
	}
	if !site.Declares(siteID, purpose) {
		return SlotNotDeclared, nil
	}
	m, ok := p.MappingFor(owner, siteID, purpose, kind)
	if !ok {
		return SlotUnmapped, nil
	}
	mapped := m.ServiceOwner
	if mapped == "" {
		mapped = owner
	}
	if mapped != owner {
		if f, err = sl.read(ctx, []string{ownerDevicesKey(mapped)}); err != nil {
			return "", err
		}
	}
	live, err := sl.advertised(ctx, devicesOf(f, mapped), kind, m.Service)
	if err != nil {
		return "", err
	}
	if !live {
		return SlotWaiting, nil
	}
	return SlotOK, nil
}

func (sl *Slots) read(ctx context.Context, keys []string) (projection.Fixture, error) {
	got, err := sl.store.storage.Read(ctx, keys)
	if err != nil {
		return projection.Fixture{}, fmt.Errorf("read projection records: %w", err)
	}
	var recs []record
	for _, k := range keys {
		recs = append(recs, got[k].records...)
	}
	return fixtureOf(recs), nil
}

// devicesOf is owner's devices in f that are not revoked, the first record
// of each runner id (the one the relay reads), newest last, at most
// MaxOwnerDevices of them (the newest).
func devicesOf(f projection.Fixture, owner string) []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range f.Devices {
		if seen[d.RunnerID] {
			continue
		}
		seen[d.RunnerID] = true
		if d.Owner == owner && !isRevoked(d) {
			out = append(out, d.RunnerID)
		}
	}
	if len(out) > MaxOwnerDevices {
		out = out[len(out)-MaxOwnerDevices:]
	}
	return out
}

// advertised says whether any of runners was seen within PresenceLiveMs
// advertising service for kind.
func (sl *Slots) advertised(ctx context.Context, runners []string, kind, service string) (bool, error) {
	if len(runners) == 0 {
		return false, nil
	}
	now, err := sl.presence.Now(ctx)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		found    bool
		firstErr error
		wg       sync.WaitGroup
	)
	sem := make(chan struct{}, presenceParallel)
	for _, runner := range runners {
		mu.Lock()
		done := found
		mu.Unlock()
		if done {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			p, ok, err := sl.presence.Presence(ctx, runner)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case found:
			case err != nil:
				if firstErr == nil {
					firstErr = err
				}
			case ok && Offers(p, now, kind, service):
				found = true
				cancel()
			}
		}()
	}
	wg.Wait()
	if found {
		return true, nil
	}
	return false, firstErr
}

// Offers says whether a presence record, live at now, advertises service
// for kind.
func Offers(p store.Presence, now int64, kind, service string) bool {
	return now-p.LastSeenAt <= PresenceLiveMs && slices.ContainsFunc(p.Capabilities, func(c protocol.Capability) bool {
		return c.Kind == kind && c.Service == service
	})
}
