package projection_test

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

type refInput struct {
	Parse      []string           `json:"parse"`
	Fixture    json.RawMessage    `json:"fixture"`
	Owners     []string           `json:"owners"`
	Pairs      [][2]string        `json:"pairs"`
	Runners    []string           `json:"runners"`
	Identities []string           `json:"identities"`
	KeyIDs     []string           `json:"keyIds"`
	Sites      []string           `json:"sites"`
	_          projection.Fixture `json:"-"`
}

type refAnswers struct {
	SitesFor            [][]string                  `json:"sitesFor"`
	RoutesFor           [][]string                  `json:"routesFor"`
	OwnersRunnableBy    [][]string                  `json:"ownersRunnableBy"`
	MayRunFor           [][]bool                    `json:"mayRunFor"`
	ConsentFor          []*projection.ConsentRecord `json:"consentFor"`
	MayRouteFor         []bool                      `json:"mayRouteFor"`
	PausedFor           []bool                      `json:"pausedFor"`
	DeviceFor           []*string                   `json:"deviceFor"`
	RevokedDevice       []bool                      `json:"revokedDevice"`
	DeviceByFingerprint []*string                   `json:"deviceByFingerprint"`
	SiteIDForKey        []*string                   `json:"siteIdForKey"`
	SiteFor             []*string                   `json:"siteFor"`
}

func reference(t *testing.T, in refInput) (parses []bool, answers refAnswers) {
	t.Helper()
	node, modules := localtest.RequireNode(t, "@byollm/relay")
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
	var v struct {
		Parses  []bool     `json:"parses"`
		Answers refAnswers `json:"answers"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return v.Parses, v.Answers
}

func ptr[T any](v T, ok bool) *T {
	if !ok {
		return nil
	}
	return &v
}

func TestAgainstTheReference(t *testing.T) {
	yes, no := true, false
	a, b, c, gone := identity(t), identity(t), identity(t), identity(t)
	d1, d2, d3 := identity(t), identity(t), identity(t)
	keyID := func(id protocol.PublicIdentity) string {
		k, err := protocol.KeyID(id.Identity)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	fixture := projection.Fixture{
		Sites: []projection.SiteRecord{
			{SiteID: "zeta", Site: a}, {SiteID: "\U0001F600", Site: b}, {SiteID: "\uFF21", Site: c},
			{SiteID: "alpha", Site: gone}, {SiteID: "zeta", Site: d1}, {SiteID: "Beta", Site: a},
		},
		Consents: []projection.ConsentRecord{
			{Owner: "alice", SiteID: "zeta"}, {Owner: "alice", SiteID: "\U0001F600", Paused: true}, {Owner: "alice", SiteID: "\uFF21"},
			{Owner: "alice", SiteID: "alpha"}, {Owner: "alice", SiteID: "Beta"}, {Owner: "alice", SiteID: "unregistered"},
			{Owner: "bob", SiteID: "zeta"}, {Owner: "bob", SiteID: "zeta", Paused: true}, {Owner: "bob", SiteID: "\uFF21", Paused: true},
			{Owner: "carol", SiteID: "zeta"}, {Owner: "carol", SiteID: "Beta"}, {Owner: "erin", SiteID: "alpha"},
		},
		Devices: []projection.DeviceRecord{
			{Owner: "alice", RunnerID: "r1", Device: d1, Revoked: &yes}, {Owner: "alice", RunnerID: "r2", Device: d2, Revoked: &no},
			{Owner: "bob", RunnerID: "r3", Device: d3}, {Owner: "carol", RunnerID: "r1", Device: d2},
		},
		Rosters: []projection.RosterRecord{
			{ID: "t1", Owner: "alice", Members: []string{"bob", "carol", "bob"}}, {ID: "t2", Owner: "alice", Members: []string{"erin", "alice"}},
			{ID: "t3", Owner: "carol", Members: []string{}},
		},
		Revoked: []projection.RevocationRecord{{Owner: "alice", SiteID: "alpha"}, {Owner: "carol", SiteID: "nowhere"}},
	}
	fixtureJSON, err := protocol.Encode(fixture)
	if err != nil {
		t.Fatal(err)
	}
	id := `{"identity":"i","encryption":"e","encryptionSig":"s"}`
	in := refInput{
		Parse: []string{
			`{"consents":[]}`, `{}`, `{"consents":[],"extra":1}`, `{"consents":null}`, `{"consents":[{"owner":"a","siteId":"s"}]}`,
			`{"consents":[{"owner":"","siteId":"s"}]}`, `{"consents":[{"owner":"a","siteId":"s","paused":null}]}`,
			`{"consents":[],"sites":[{"siteId":"s","site":` + id + `}]}`, `{"consents":[],"sites":[{"siteId":"s","site":` + id + `,"retiringUntil":0}]}`,
			`{"consents":[],"sites":[{"siteId":"s","site":` + id + `,"retiringUntil":1.5}]}`, `{"consents":[],"sites":[{"siteId":"s","site":` + id + `,"succeeds":[]}]}`,
			`{"consents":[],"sites":[{"siteId":"s","site":{"identity":"i","encryption":"e"}}]}`,
			`{"consents":[],"devices":[{"owner":"a","runnerId":"r","device":` + id + `,"revoked":true}]}`,
			`{"consents":[],"devices":[{"owner":"a","runnerId":"r","device":` + id + `,"revoked":1}]}`,
			`{"consents":[],"rosters":[{"id":"t","owner":"a","members":[]}]}`, `{"consents":[],"rosters":[{"id":"t","owner":"a"}]}`,
			`{"consents":[],"rosters":[{"id":"t","owner":"a","members":[""]}]}`, `{"consents":[],"revoked":[{"owner":"a","siteId":"s","why":"x"}]}`,
			`[]`, `null`, `{"consents":[]} x`, `{"consents":[],"consents":null}`, `{"consents":null,"consents":[]}`,
		},
		Fixture:    fixtureJSON,
		Owners:     []string{"alice", "bob", "carol", "dave", "erin"},
		Runners:    []string{"r1", "r2", "r3", "r9"},
		Identities: []string{d1.Identity, d2.Identity, d3.Identity, a.Identity},
		KeyIDs:     []string{keyID(a), keyID(b), keyID(d1), keyID(d3), "BYOLLM-NOPE"},
		Sites:      []string{"zeta", "alpha", "nope"},
	}
	for _, o := range in.Owners {
		for _, s := range []string{"zeta", "alpha", "\uFF21", "\U0001F600", "Beta", "unregistered", "nowhere"} {
			in.Pairs = append(in.Pairs, [2]string{o, s})
		}
	}
	parses, want := reference(t, in)

	for i, text := range in.Parse {
		_, err := projection.Parse([]byte(text))
		if (err == nil) != parses[i] {
			t.Errorf("parse %s: reference accepts %v, Parse says %v", text, parses[i], err)
		}
	}

	f, err := projection.Parse(fixtureJSON)
	if err != nil {
		t.Fatal(err)
	}
	p := build(t, f)
	var got refAnswers
	for _, o := range in.Owners {
		got.SitesFor = append(got.SitesFor, siteIDs(p.SitesFor(o)))
		routes := []string{}
		for _, r := range p.RoutesFor(o) {
			routes = append(routes, store.RouteKey(r.SiteID, r.Owner))
		}
		got.RoutesFor = append(got.RoutesFor, routes)
		got.OwnersRunnableBy = append(got.OwnersRunnableBy, p.OwnersRunnableBy(o))
		var row []bool
		for _, j := range in.Owners {
			row = append(row, p.MayRunFor(o, j))
		}
		got.MayRunFor = append(got.MayRunFor, row)
	}
	for _, pair := range in.Pairs {
		got.ConsentFor = append(got.ConsentFor, ptr(p.ConsentFor(pair[0], pair[1])))
		got.MayRouteFor = append(got.MayRouteFor, p.MayRouteFor(pair[0], pair[1]))
		got.PausedFor = append(got.PausedFor, p.PausedFor(pair[0], pair[1]))
	}
	for _, r := range in.Runners {
		d, ok := p.DeviceFor(r)
		got.DeviceFor = append(got.DeviceFor, ptr(d.Owner, ok))
		got.RevokedDevice = append(got.RevokedDevice, p.RevokedDevice(r))
	}
	for _, i := range in.Identities {
		d, ok := p.DeviceByIdentity(i)
		got.DeviceByFingerprint = append(got.DeviceByFingerprint, ptr(d.RunnerID, ok))
	}
	for _, k := range in.KeyIDs {
		got.SiteIDForKey = append(got.SiteIDForKey, ptr(p.SiteIDForKey(k)))
	}
	for _, s := range in.Sites {
		rec, ok := p.SiteFor(s)
		got.SiteFor = append(got.SiteFor, ptr(rec.Site.Identity, ok))
	}
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("answers differ\n go:        %s\n reference: %s", g, w)
	}
}
