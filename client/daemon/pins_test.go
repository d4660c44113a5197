package daemon

import (
	"context"
	"testing"

	"github.com/byorelay/byorelay/protocol"
)

func newTestDaemon(t *testing.T) *Daemon {
	t.Helper()
	keys, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{RelayURL: "http://relay.invalid", Keys: keys, Backend: EchoBackend{}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func siteKeys(t *testing.T) *protocol.Keys {
	t.Helper()
	k, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func sites(ids ...protocol.PublicIdentity) protocol.Record[protocol.PublicIdentity] {
	var r protocol.Record[protocol.PublicIdentity]
	for _, id := range ids {
		kid, _ := protocol.KeyID(id.Identity)
		r.Set(kid, id)
	}
	return r
}

func TestASitePinnedAtFirstSightRefusesAChangedKey(t *testing.T) {
	d := newTestDaemon(t)
	s := siteKeys(t)
	d.applySites(sites(s.Public()), nil)
	if got := d.ServedSites(); len(got) != 1 || got[0] != s.KeyID() {
		t.Fatalf("served %v", got)
	}

	// Same identity, another encryption key (validly signed by the
	// identity): the key that work is sealed to moved under a pinned id.
	other := siteKeys(t)
	moved := protocol.PublicIdentity{Identity: s.Public().Identity, Encryption: other.Public().Encryption}
	moved.EncryptionSig = s.Sign([]byte(protocol.EncryptionKeyContext + ":" + moved.Encryption))
	d.applySites(sites(moved), nil)
	if pin, _ := d.pinFor(s.KeyID()); pin != s.Public() {
		t.Fatal("a changed key replaced the pinned one")
	}
}

func TestAnEntryThatDoesNotVerifyOrIsMisfiledIsIgnored(t *testing.T) {
	d := newTestDaemon(t)
	s, t2 := siteKeys(t), siteKeys(t)
	forged := s.Public()
	forged.Encryption = t2.Public().Encryption // not signed by s's identity
	var r protocol.Record[protocol.PublicIdentity]
	r.Set(s.KeyID(), forged)
	r.Set(s.KeyID()+"X", t2.Public()) // filed under an id that is not its key id
	d.applySites(r, nil)
	if got := d.ServedSites(); len(got) != 0 {
		t.Fatalf("served %v, want nothing", got)
	}
}

func TestARotatedSiteIsFollowedThroughItsSuccession(t *testing.T) {
	d := newTestDaemon(t)
	old := siteKeys(t)
	d.applySites(sites(old.Public()), nil)

	next := siteKeys(t)
	link, err := protocol.SignSuccession(old, next.Public())
	if err != nil {
		t.Fatal(err)
	}
	var succ protocol.Record[protocol.SiteSuccession]
	retiring := d.now() + 60_000
	succ.Set(next.KeyID(), protocol.SiteSuccession{Succeeds: []protocol.Succession{link}, RetiringUntil: retiring})
	d.applySites(sites(next.Public()), succ)

	served := d.ServedSites()
	if len(served) != 2 {
		t.Fatalf("served %v, want the new key and the retiring old one", served)
	}
	if until := d.retiring[old.KeyID()]; until != retiring {
		t.Fatalf("old key retires at %d, want %d", until, retiring)
	}

	// A chain signed by a key this device never approved is not a rotation.
	stranger, newer := siteKeys(t), siteKeys(t)
	bad, _ := protocol.SignSuccession(stranger, newer.Public())
	succ.Set(newer.KeyID(), protocol.SiteSuccession{Succeeds: []protocol.Succession{bad}})
	d.applySites(sites(next.Public(), newer.Public()), succ)
	if _, ok := d.retiring[stranger.KeyID()]; ok {
		t.Fatal("a stranger's chain started a retirement")
	}
}

func TestAWithdrawnSiteStopsItsRunningJobs(t *testing.T) {
	d := newTestDaemon(t)
	s := siteKeys(t)
	d.applySites(sites(s.Public()), nil)
	ctx, cancel := context.WithCancelCause(context.Background())
	d.active["lease-1"] = &held{jobID: "job-1", site: s.KeyID(), cancel: cancel}
	d.applySites(nil, nil)
	if got := d.ServedSites(); len(got) != 0 {
		t.Fatalf("served %v after the site left the set", got)
	}
	if ctx.Err() == nil {
		t.Fatal("the withdrawn site's job kept running")
	}
}
