package grants_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/controlplane/grants"
	"github.com/byorelay/byorelay/internal/grant"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
)

// The people of the law's rows. alice's device claims unless a row says
// otherwise; bob and carol each own a team alice may be on.
const (
	carol = "carol"
	dave  = "dave" // on nobody's roster
	site  = "site-1"
)

// lawConsent is one person's consent to a site, in the shape both stores
// are fed: the mappings it carries, and whether it was paused or revoked
// after it was given.
type lawConsent struct {
	SiteID   string               `json:"siteId"`
	User     string               `json:"user"`
	Mappings []projection.Mapping `json:"mappings,omitempty"`
	Paused   bool                 `json:"paused,omitempty"`
	Revoked  bool                 `json:"revoked,omitempty"`
}

// lawMember is user on owner's team; Removed is added and then removed.
type lawMember struct {
	Owner   string `json:"owner"`
	User    string `json:"user"`
	Removed bool   `json:"removed,omitempty"`
}

// lawRow is one question to the grant law and the reference's answer:
// Service when granted, else Reason (and whether it is permanent).
type lawRow struct {
	name      string
	consents  []lawConsent
	members   []lawMember
	job       string // the job's owner
	kind      string
	purpose   string // the stub's; "" names none
	device    string // the claiming device's owner
	caps      []protocol.Capability
	noPolicy  bool // the policy read failed
	service   string
	reason    string
	permanent bool
}

func mapping(purpose, kind, service, owner string) projection.Mapping {
	return projection.Mapping{Purpose: purpose, Kind: kind, Service: service, ServiceOwner: owner}
}

func consented(user string, mappings ...projection.Mapping) lawConsent {
	return lawConsent{SiteID: site, User: user, Mappings: mappings}
}

func caps(cs ...protocol.Capability) []protocol.Capability { return cs }

// lawRows are the grant law's cases: the comparison that motivated it (a
// mapping names whose service, a device with two services runs the mapped
// one, an unmapped slot waits), each step's decline, the order of the steps,
// and the offer scope.
func lawRows() []lawRow {
	const chat, gen = "llm.chat", "llm.generate"
	def := grants.ReservedPurpose
	qwenTeam := capability(chat, "qwen", "team")
	return []lawRow{
		{name: "a person on two teams that both run qwen, who mapped carol's, is declined on bob's device",
			consents: []lawConsent{consented(alice, mapping(def, chat, "qwen", carol))},
			members:  []lawMember{{Owner: bob, User: alice}, {Owner: carol, User: alice}},
			job:      alice, kind: chat, device: bob, caps: caps(qwenTeam),
			reason: grants.ReasonResolvedElsewhere},
		{name: "and is granted on carol's",
			consents: []lawConsent{consented(alice, mapping(def, chat, "qwen", carol))},
			members:  []lawMember{{Owner: bob, User: alice}, {Owner: carol, User: alice}},
			job:      alice, kind: chat, device: carol, caps: caps(qwenTeam),
			service: "qwen"},
		{name: "a purpose mapped to big on a device offering small and big is granted big",
			consents: []lawConsent{consented(bob, mapping("summaries", gen, "big", alice))},
			members:  []lawMember{{Owner: alice, User: bob}},
			job:      bob, kind: gen, purpose: "summaries", device: alice,
			caps:    caps(capability(gen, "small", "team"), capability(gen, "big", "team")),
			service: "big"},
		{name: "an unmapped slot waits, even on a device with exactly one service",
			consents: []lawConsent{consented(alice)},
			job:      alice, kind: chat, device: alice, caps: caps(qwenTeam),
			reason: grants.ReasonUnmapped},
		{name: "the owner's device with two services runs the one mapped (beta)",
			consents: []lawConsent{consented(alice, mapping(def, chat, "beta", ""))},
			job:      alice, kind: chat, device: alice,
			caps:    caps(capability(chat, "alpha", "team"), capability(chat, "beta", "team")),
			service: "beta"},
		{name: "and the other when remapped (alpha)",
			consents: []lawConsent{consented(alice, mapping(def, chat, "alpha", ""))},
			job:      alice, kind: chat, device: alice,
			caps:    caps(capability(chat, "alpha", "team"), capability(chat, "beta", "team")),
			service: "alpha"},
		{name: "a teammate's job mapped to the device owner's service",
			consents: []lawConsent{consented(bob, mapping(def, chat, "qwen", alice))},
			members:  []lawMember{{Owner: alice, User: bob}},
			job:      bob, kind: chat, device: alice, caps: caps(qwenTeam),
			service: "qwen"},
		{name: "a teammate's job mapped to a same-named service of their own is another machine's",
			consents: []lawConsent{consented(bob, mapping(def, chat, "qwen", ""))},
			members:  []lawMember{{Owner: alice, User: bob}},
			job:      bob, kind: chat, device: alice, caps: caps(qwenTeam),
			reason: grants.ReasonResolvedElsewhere},
		{name: "a removed member is refused for good",
			consents: []lawConsent{consented(bob, mapping(def, chat, "qwen", alice))},
			members:  []lawMember{{Owner: alice, User: bob, Removed: true}},
			job:      bob, kind: chat, device: alice, caps: caps(qwenTeam),
			reason: grants.ReasonNotAMember, permanent: true},
		{name: "somebody on no team of the device owner is refused for good",
			consents: []lawConsent{consented(dave, mapping(def, chat, "qwen", alice))},
			members:  []lawMember{{Owner: alice, User: bob}},
			job:      dave, kind: chat, device: alice, caps: caps(qwenTeam),
			reason: grants.ReasonNotAMember, permanent: true},
		{name: "a revoked consent is refused for good",
			consents: []lawConsent{{SiteID: site, User: alice, Mappings: []projection.Mapping{mapping(def, chat, "qwen", "")}, Revoked: true}},
			job:      alice, kind: chat, device: alice, caps: caps(qwenTeam),
			reason: grants.ReasonNotConsented, permanent: true},
		{name: "a consent never given is refused for good",
			consents: []lawConsent{{SiteID: "another-site", User: alice, Mappings: []projection.Mapping{mapping(def, chat, "qwen", "")}}},
			job:      alice, kind: chat, device: alice, caps: caps(qwenTeam),
			reason: grants.ReasonNotConsented, permanent: true},
		{name: "a paused consent waits",
			consents: []lawConsent{{SiteID: site, User: alice, Mappings: []projection.Mapping{mapping(def, chat, "qwen", "")}, Paused: true}},
			job:      alice, kind: chat, device: alice, caps: caps(qwenTeam),
			reason: grants.ReasonConsentPaused},
		{name: "consent is asked before membership",
			consents: []lawConsent{{SiteID: site, User: bob, Mappings: []projection.Mapping{mapping(def, chat, "qwen", alice)}, Paused: true}},
			job:      bob, kind: chat, device: alice, caps: caps(qwenTeam),
			reason: grants.ReasonConsentPaused},
		{name: "membership is asked before the mapping",
			consents: []lawConsent{consented(bob)},
			job:      bob, kind: chat, device: alice, caps: caps(qwenTeam),
			reason: grants.ReasonNotAMember, permanent: true},
		{name: "the owner's own job is never asked about membership",
			consents: []lawConsent{consented(alice, mapping(def, chat, "qwen", ""))},
			members:  []lawMember{{Owner: alice, User: alice, Removed: true}},
			job:      alice, kind: chat, device: alice, caps: caps(qwenTeam),
			service: "qwen"},
		{name: "the owner's own job may run on a private service",
			consents: []lawConsent{consented(alice, mapping(def, chat, "mine", ""))},
			job:      alice, kind: chat, device: alice, caps: caps(capability(chat, "mine", "private")),
			service: "mine"},
		{name: "a mapping naming its owner explicitly is the same as naming none",
			consents: []lawConsent{consented(alice, mapping(def, chat, "mine", alice))},
			job:      alice, kind: chat, device: alice, caps: caps(capability(chat, "mine", "private")),
			service: "mine"},
		{name: "a teammate's job on a service offered privately waits",
			consents: []lawConsent{consented(bob, mapping(def, chat, "mine", alice))},
			members:  []lawMember{{Owner: alice, User: bob}},
			job:      bob, kind: chat, device: alice, caps: caps(capability(chat, "mine", "private")),
			reason: grants.ReasonResolvedElsewhere},
		{name: "a scope this build does not know does not widen",
			consents: []lawConsent{consented(bob, mapping(def, chat, "odd", alice))},
			members:  []lawMember{{Owner: alice, User: bob}},
			job:      bob, kind: chat, device: alice, caps: caps(capability(chat, "odd", "everyone")),
			reason: grants.ReasonResolvedElsewhere},
		{name: "a mapped service this device does not offer waits",
			consents: []lawConsent{consented(alice, mapping(def, chat, "gone", ""))},
			job:      alice, kind: chat, device: alice, caps: caps(qwenTeam),
			reason: grants.ReasonResolvedElsewhere},
		{name: "a mapped service offered only for another kind waits",
			consents: []lawConsent{consented(alice, mapping(def, chat, "qwen", ""))},
			job:      alice, kind: chat, device: alice, caps: caps(capability(gen, "qwen", "team")),
			reason: grants.ReasonResolvedElsewhere},
		{name: "a mapping for another kind leaves the slot unmapped",
			consents: []lawConsent{consented(alice, mapping(def, gen, "qwen", ""))},
			job:      alice, kind: chat, device: alice, caps: caps(qwenTeam, capability(gen, "qwen", "team")),
			reason: grants.ReasonUnmapped},
		{name: "a stub's purpose is its own slot, apart from the reserved one",
			consents: []lawConsent{consented(alice, mapping(def, chat, "qwen", ""))},
			job:      alice, kind: chat, purpose: "summaries", device: alice, caps: caps(qwenTeam),
			reason: grants.ReasonUnmapped},
		{name: "a failed policy read waits",
			consents: []lawConsent{consented(alice, mapping(def, chat, "qwen", ""))},
			job:      alice, kind: chat, device: alice, caps: caps(qwenTeam), noPolicy: true,
			reason: grants.ReasonStoreUnavailable},
	}
}

// lawFixture is the projection of a row's world, as the control plane
// would publish it: consents with their mappings, revocations as records
// beside them, and each team as a roster of its current members.
func lawFixture(t *testing.T, row lawRow) *projection.Projection {
	t.Helper()
	f := projection.Fixture{}
	for _, c := range row.consents {
		f.Consents = append(f.Consents, projection.ConsentRecord{SiteID: c.SiteID, Owner: c.User, Paused: c.Paused, Mappings: c.Mappings})
		if c.Revoked {
			f.Revoked = append(f.Revoked, projection.RevocationRecord{SiteID: c.SiteID, Owner: c.User})
		}
	}
	teams := map[string][]string{}
	var owners []string
	for _, m := range row.members {
		if _, ok := teams[m.Owner]; !ok {
			owners = append(owners, m.Owner)
			teams[m.Owner] = nil
		}
		if !m.Removed {
			teams[m.Owner] = append(teams[m.Owner], m.User)
		}
	}
	for _, o := range owners {
		f.Rosters = append(f.Rosters, projection.RosterRecord{ID: o + "-team", Owner: o, Members: teams[o]})
	}
	p, err := projection.New(f)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func lawRequest(t *testing.T, i int, row lawRow) grant.Request {
	in := grant.Request{
		Job: protocol.ClaimedStub{
			ID: fmt.Sprintf("job-%d", i), Kind: row.kind, Owner: row.job, Site: "site-key-id", Audience: "team",
			Purpose: row.purpose, SizeClass: "small", DeadlineAt: 1_700_000_900_000,
			Lease: protocol.Lease{ID: "lease-1", ExpiresAt: 1_700_000_060_000},
		},
		SiteID: site, SiteKey: "site-key-id", Purpose: row.purpose,
		Owner: row.device, RunnerID: "runner-1", Capabilities: row.caps,
	}
	if !row.noPolicy {
		in.Projection = lawFixture(t, row)
	}
	return in
}

// The grant law, row by row, through byorelay's author: each row's decision
// and reason are the reference's. TestTheGrantLawIsTheReferencesEngines
// holds the rows to the reference engine itself.
func TestTheGrantLaw(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	a := newAuthor(t, grants.Options{Clock: clock.NewManual(now)})
	for i, row := range lawRows() {
		t.Run(row.name, func(t *testing.T) {
			d, err := a.Grant(context.Background(), lawRequest(t, i, row))
			if err != nil {
				t.Fatal(err)
			}
			if row.reason != "" {
				if d.Granted != nil || d.Declined == nil || d.Declined.Reason != row.reason || d.Declined.Permanent != row.permanent {
					t.Fatalf("decision %s, want declined %s (permanent %v)", describe(d), row.reason, row.permanent)
				}
				return
			}
			if d.Declined != nil || d.Granted == nil || d.Granted.Service != row.service {
				t.Fatalf("decision %s, want granted %s", describe(d), row.service)
			}
			purpose := row.purpose
			if purpose == "" {
				purpose = grants.ReservedPurpose
			}
			if g := d.Granted; g.User != row.job || g.Owner != row.device || g.Purpose != purpose || g.Kind != row.kind {
				t.Fatalf("grant %+v, want user %s owner %s purpose %s kind %s", g, row.job, row.device, purpose, row.kind)
			}
		})
	}
}

func describe(d grant.Decision) string {
	switch {
	case d.Granted != nil:
		return "granted " + d.Granted.Service
	case d.Declined != nil:
		return fmt.Sprintf("declined %s (permanent %v)", d.Declined.Reason, d.Declined.Permanent)
	}
	return "empty"
}

// referenceOutcome is the reference engine's GrantOutcome.
type referenceOutcome struct {
	Granted  *protocol.SignedGrant `json:"granted"`
	Declined *struct {
		Reason    string `json:"reason"`
		Permanent bool   `json:"permanent"`
	} `json:"declined"`
}

// The same rows through @byollm/control-plane 0.1.1's ControlPlane, over
// its MemoryPolicyStore fed the same world, with the same key, clock and
// grant ids: every decision, reason and permanence is the same, and every
// grant is the same bytes, signature included (Ed25519 is deterministic).
func TestTheGrantLawIsTheReferencesEngines(t *testing.T) {
	node, modules := localtest.RequireNode(t, "@byollm/control-plane")
	now := time.UnixMilli(1_700_000_000_000)
	seed, err := grants.NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	grantID := func(i int) string { return fmt.Sprintf("grant_row-%d", i) }
	rows := lawRows()
	var (
		decisions []grant.Decision
		inputs    []map[string]any
	)
	for i, row := range rows {
		a, err := grants.New(seed, grants.Options{Clock: clock.NewManual(now), NewGrantID: func() (string, error) { return grantID(i), nil }})
		if err != nil {
			t.Fatal(err)
		}
		in := lawRequest(t, i, row)
		d, err := a.Grant(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		decisions = append(decisions, d)
		inputs = append(inputs, map[string]any{
			"consents": row.consents, "members": row.members, "storeFails": row.noPolicy,
			"job": in.Job, "siteId": in.SiteID, "siteKey": in.SiteKey, "owner": in.Owner,
			"purpose": in.Purpose, "capabilities": in.Capabilities, "grantId": grantID(i),
		})
	}
	var unused [32]byte
	if _, err := rand.Read(unused[:]); err != nil {
		t.Fatal(err)
	}
	keys, err := protocol.NewKeys(seed, unused[:])
	if err != nil {
		t.Fatal(err)
	}
	stored := keys.Stored(now.UnixMilli())
	outcomes := referenceEngine(t, node, modules, map[string]any{
		"keys": map[string]string{"identityPrivate": stored.IdentityPrivate, "identityPublic": stored.IdentityPublic},
		"now":  now.UnixMilli(), "rows": inputs,
	})
	if len(outcomes) != len(rows) {
		t.Fatalf("the reference answered %d rows of %d", len(outcomes), len(rows))
	}
	for i, row := range rows {
		ref, got := outcomes[i], decisions[i]
		switch {
		case ref.Declined != nil:
			if got.Declined == nil || got.Declined.Reason != ref.Declined.Reason || got.Declined.Permanent != ref.Declined.Permanent {
				t.Errorf("%s: byorelay %s, the reference declined %s (permanent %v)", row.name, describe(got), ref.Declined.Reason, ref.Declined.Permanent)
			}
		case ref.Granted != nil:
			if got.Granted == nil || *got.Granted != *ref.Granted {
				t.Errorf("%s: byorelay %s\n%+v\nthe reference granted\n%+v", row.name, describe(got), got.Granted, *ref.Granted)
			}
		default:
			t.Errorf("%s: the reference answered neither", row.name)
		}
	}
}

func referenceEngine(t *testing.T, node, modules string, in any) []referenceOutcome {
	t.Helper()
	stdin, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, filepath.Join("testdata", "reference.mjs"), modules)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	var outcomes []referenceOutcome
	if err := json.Unmarshal(out, &outcomes); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return outcomes
}
