package controlplane_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
)

// testCopies is the copy count of the tests' tables (the storage pairs of
// main_test.go too): the rules do not depend on the count, and a small one
// keeps every site change and a read through every copy quick on DynamoDB
// Local. The spread test keeps the default.
const testCopies = 8

// oneSite is a fixture of site-a with key, alice consenting to it with
// device r1, and site-b beside it.
func oneSite(t *testing.T, key *protocol.Keys, withSiteA bool) projection.Fixture {
	f := projection.EmptyFixture()
	if withSiteA {
		f.Sites = append(f.Sites, projection.SiteRecord{SiteID: "site-a", Site: key.Public()})
	}
	f.Sites = append(f.Sites, projection.SiteRecord{SiteID: "site-b", Site: newKeys(t).Public()})
	f.Consents = []projection.ConsentRecord{{Owner: "alice", SiteID: "site-a"}, {Owner: "alice", SiteID: "site-b"}}
	f.Devices = []projection.DeviceRecord{{Owner: "alice", RunnerID: "r1", Device: newKeys(t).Public()}}
	return f
}

// throughEveryCopy reads, through each copy the storage keeps (the home
// when it keeps none), the scope of r1's daemon request and of site-a's
// own request, and hands each to check.
func throughEveryCopy(t *testing.T, s *controlplane.Store, storage controlplane.Storage, check func(via string, p *projection.Projection)) {
	t.Helper()
	copies := []int{-1}
	if n := controlplane.SiteCopies(storage); n > 0 {
		copies = copies[:0]
		for k := range n {
			copies = append(copies, k)
		}
	}
	for _, k := range copies {
		for _, q := range []projection.Query{{RunnerID: "r1"}, {SiteID: "site-a"}} {
			p, err := controlplane.ScopedVia(s, t.Context(), q, k)
			if err != nil {
				t.Fatal(err)
			}
			check(fmt.Sprintf("copy %d, %+v", k, q), p)
		}
	}
}

// A site change is in force on the very next request through every copy:
// a rotated key, changed purposes, and the site removed (by an import
// without it: the registry has no other way to drop a site), which leaves
// its consenting daemon no route to it.
func TestASiteChangeIsInForceThroughEveryCopy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		storage func(t *testing.T) controlplane.Storage
	}{
		{"memory", func(t *testing.T) controlplane.Storage { return controlplane.NewMemoryStorage() }},
		{"dynamodb-local", func(t *testing.T) controlplane.Storage {
			return controlplane.NewDynamoStorage(dynamoClient(t), newTable(t)).WithSiteCopies(testCopies)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			storage := tc.storage(t)
			s := controlplane.NewStore(storage)
			admin := controlplane.NewAdmin(controlplane.AdminConfig{Store: s, Logger: quiet})
			k1, k2 := newKeys(t), newKeys(t)
			if _, err := admin.Import(ctx, oneSite(t, k1, true)); err != nil {
				t.Fatal(err)
			}
			keyIs := func(want *protocol.Keys) func(string, *projection.Projection) {
				return func(via string, p *projection.Projection) {
					site, ok := p.SiteFor("site-a")
					if !ok || site.Site != want.Public() {
						t.Fatalf("through %s: site-a is %+v (found %v), want key %s", via, site.Site, ok, want.Public().Identity)
					}
				}
			}
			throughEveryCopy(t, s, storage, keyIs(k1))

			link, _ := protocol.SignSuccession(k1, k2.Public())
			if _, _, err := admin.RotateSite(ctx, "site-a", k2.Public(), link); err != nil {
				t.Fatal(err)
			}
			throughEveryCopy(t, s, storage, keyIs(k2))

			if _, _, err := admin.SetSitePurposes(ctx, "site-a", []string{"chat"}); err != nil {
				t.Fatal(err)
			}
			throughEveryCopy(t, s, storage, func(via string, p *projection.Projection) {
				if p.Declares("site-a", "other") || !p.Declares("site-a", "chat") {
					t.Fatalf("through %s: site-a's purposes are not [chat]", via)
				}
			})

			// Copies are not records: the export lists each site once.
			f, err := admin.Export(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(f.Sites) != 2 {
				t.Fatalf("exported %d sites, want 2: %+v", len(f.Sites), f.Sites)
			}

			if _, err := admin.Import(ctx, oneSite(t, k2, false)); err != nil {
				t.Fatal(err)
			}
			throughEveryCopy(t, s, storage, func(via string, p *projection.Projection) {
				if _, ok := p.SiteFor("site-a"); ok {
					t.Fatalf("through %s: site-a is still registered", via)
				}
				for _, r := range p.RoutesFor("alice") {
					if r.SiteID == "site-a" {
						t.Fatalf("through %s: alice still routes to site-a", via)
					}
				}
			})
			if _, ok := storage.(*controlplane.DynamoStorage); ok {
				for k := range testCopies {
					if copyExists(t, storage, "site-a", k) {
						t.Fatalf("copy %d of the removed site-a survived the import", k)
					}
				}
			}
		})
	}
}

// copyExists reads copy k's item straight from the table.
func copyExists(t *testing.T, storage controlplane.Storage, siteID string, k int) bool {
	t.Helper()
	out, err := dynamoClient(t).GetItem(t.Context(), &dynamodb.GetItemInput{
		TableName:      aws.String(controlplane.TableOf(storage)),
		Key:            map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: controlplane.SiteCopyKey(siteID, k)}, "sk": &types.AttributeValueMemberS{Value: "#"}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item != nil
}

// A change whose copy writes partly fail answers an error, and the copies
// it did not write still hold the site as it was (the window the decision
// record owns up to); running the change again, though it is now refused
// (the site already has the key), writes them. The failures are injected:
// DynamoDB Local never fails one write of many on its own.
func TestAFailedFanOutIsRepairedByRunningTheChangeAgain(t *testing.T) {
	ctx := t.Context()
	api := &hooked{DynamoAPI: dynamoClient(t)}
	storage := controlplane.NewDynamoStorage(api, newTable(t)).WithSiteCopies(testCopies)
	s := controlplane.NewStore(storage)
	admin := controlplane.NewAdmin(controlplane.AdminConfig{Store: s, Logger: quiet})
	k1, k2 := newKeys(t), newKeys(t)
	if _, err := admin.Import(ctx, oneSite(t, k1, true)); err != nil {
		t.Fatal(err)
	}
	failed := func(k int) bool { return k%3 == 1 }
	api.failPut = func(pk string) error {
		for k := range testCopies {
			if failed(k) && pk == controlplane.SiteCopyKey("site-a", k) {
				return &types.ProvisionedThroughputExceededException{Message: aws.String("injected: slow down")}
			}
		}
		return nil
	}
	link, _ := protocol.SignSuccession(k1, k2.Public())
	_, _, err := admin.RotateSite(ctx, "site-a", k2.Public(), link)
	if err == nil || !strings.Contains(err.Error(), "read copies were not written") {
		t.Fatalf("rotate with failing copy writes: %v, want an error naming the copies", err)
	}
	for k := range testCopies {
		p, err := controlplane.ScopedVia(s, ctx, projection.Query{RunnerID: "r1"}, k)
		if err != nil {
			t.Fatal(err)
		}
		site, _ := p.SiteFor("site-a")
		want := k2
		if failed(k) {
			want = k1
		}
		if site.Site != want.Public() {
			t.Fatalf("copy %d (failed: %v) holds key %s", k, failed(k), site.Site.Identity)
		}
	}

	api.failPut = nil
	_, _, err = admin.RotateSite(ctx, "site-a", k2.Public(), link)
	refusal(t, err, http.StatusBadRequest)
	for k := range testCopies {
		p, err := controlplane.ScopedVia(s, ctx, projection.Query{SiteID: "site-a"}, k)
		if err != nil {
			t.Fatal(err)
		}
		if site, _ := p.SiteFor("site-a"); site.Site != k2.Public() {
			t.Fatalf("after the re-run, copy %d holds key %s", k, site.Site.Identity)
		}
	}
}

// A copy holding a later version than the home's write is left as it is:
// a slow fan-out of an earlier change never overwrites a later change's.
func TestAnEarlierFanOutNeverOverwritesALaterCopy(t *testing.T) {
	ctx := t.Context()
	storage := controlplane.NewDynamoStorage(dynamoClient(t), newTable(t)).WithSiteCopies(testCopies)
	s := controlplane.NewStore(storage)
	admin := controlplane.NewAdmin(controlplane.AdminConfig{Store: s, Logger: quiet})
	if _, _, err := admin.RegisterSite(ctx, "site-a", newKeys(t).Public()); err != nil {
		t.Fatal(err)
	}
	before := readCopy(t, storage, "site-a", 3)
	later := map[string]types.AttributeValue{}
	for name, v := range before {
		later[name] = v
	}
	later["v"] = &types.AttributeValueMemberN{Value: "1000"}
	later["rs"] = &types.AttributeValueMemberS{Value: "[]"}
	if _, err := dynamoClient(t).PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(controlplane.TableOf(storage)), Item: later}); err != nil {
		t.Fatal(err)
	}
	if err := controlplane.FanOut(storage, ctx, "site-a"); err != nil {
		t.Fatal(err)
	}
	if got := readCopy(t, storage, "site-a", 3); attr(got, "v") != "1000" || attr(got, "rs") != "[]" {
		t.Fatalf("the later copy was overwritten: v %s", attr(got, "v"))
	}
	if got := readCopy(t, storage, "site-a", 4); attr(got, "v") != attr(before, "v") {
		t.Fatalf("copy 4 is at v %s, want the home's %s", attr(got, "v"), attr(before, "v"))
	}
}

func readCopy(t *testing.T, storage controlplane.Storage, siteID string, k int) map[string]types.AttributeValue {
	t.Helper()
	out, err := dynamoClient(t).GetItem(t.Context(), &dynamodb.GetItemInput{
		TableName:      aws.String(controlplane.TableOf(storage)),
		Key:            map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: controlplane.SiteCopyKey(siteID, k)}, "sk": &types.AttributeValueMemberS{Value: "#"}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil || out.Item == nil {
		t.Fatalf("copy %d of %s: %v (item %v)", k, siteID, err, out.Item)
	}
	return out.Item
}

func attr(item map[string]types.AttributeValue, name string) string {
	switch v := item[name].(type) {
	case *types.AttributeValueMemberN:
		return v.Value
	case *types.AttributeValueMemberS:
		return v.Value
	}
	return ""
}

// Raising the copy count on a live table is safe: a copy above the old
// count is not yet written, and a request reading it reads the site at its
// home rather than as no site. The next change of the site (or an import)
// writes every copy of the new count.
func TestARaisedCopyCountReadsAMissingCopyAtHome(t *testing.T) {
	ctx := t.Context()
	table := newTable(t)
	old := controlplane.NewDynamoStorage(dynamoClient(t), table).WithSiteCopies(4)
	k1 := newKeys(t)
	if _, err := controlplane.NewAdmin(controlplane.AdminConfig{Store: controlplane.NewStore(old), Logger: quiet}).Import(ctx, oneSite(t, k1, true)); err != nil {
		t.Fatal(err)
	}
	raised := controlplane.NewDynamoStorage(dynamoClient(t), table).WithSiteCopies(8)
	if copyExists(t, raised, "site-a", 6) {
		t.Fatal("copy 6 exists before anything wrote 8 copies")
	}
	s := controlplane.NewStore(raised)
	throughEveryCopy(t, s, raised, func(via string, p *projection.Projection) {
		if site, ok := p.SiteFor("site-a"); !ok || site.Site != k1.Public() {
			t.Fatalf("through %s: site-a is %+v (found %v)", via, site, ok)
		}
	})
	if _, _, err := controlplane.NewAdmin(controlplane.AdminConfig{Store: s, Logger: quiet}).SetSitePurposes(ctx, "site-a", nil); err != nil {
		t.Fatal(err)
	}
	for k := range 8 {
		if !copyExists(t, raised, "site-a", k) {
			t.Fatalf("copy %d is missing after a site change at 8 copies", k)
		}
	}
}

// One site's fleet: 100 daemons of 100 owners, all consenting to one site,
// and the site's own requests. Their reads of the site spread over its
// copies, so no key is read by more than an eighth of the requests; the
// site's home is read by none of them.
func TestOneSitesRequestsSpreadOverItsCopies(t *testing.T) {
	ctx := t.Context()
	table := newTable(t)
	const daemons, rounds = 100, 3
	f := projection.EmptyFixture()
	f.Sites = []projection.SiteRecord{{SiteID: "popular", Site: newKeys(t).Public()}}
	for i := range daemons {
		owner := fmt.Sprintf("owner-%03d", i)
		f.Consents = append(f.Consents, projection.ConsentRecord{Owner: owner, SiteID: "popular"})
		f.Devices = append(f.Devices, projection.DeviceRecord{Owner: owner, RunnerID: fmt.Sprintf("runner-%03d", i), Device: newKeys(t).Public()})
	}
	if _, err := controlplane.NewAdmin(controlplane.AdminConfig{Store: controlplane.NewStore(controlplane.NewDynamoStorage(dynamoClient(t), table)), Logger: quiet}).Import(ctx, f); err != nil {
		t.Fatal(err)
	}
	api := &hooked{DynamoAPI: dynamoClient(t)}
	s := controlplane.NewStore(controlplane.NewDynamoStorage(api, table))
	requests := 0
	for range rounds {
		for i := range daemons {
			p, err := s.Scoped(ctx, projection.Query{RunnerID: fmt.Sprintf("runner-%03d", i)})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.SitesFor(fmt.Sprintf("owner-%03d", i))) != 1 {
				t.Fatalf("runner-%03d sees no site", i)
			}
			p, err = s.Scoped(ctx, projection.Query{SiteID: "popular"})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := p.SiteFor("popular"); !ok {
				t.Fatal("the site's own request does not find it")
			}
			requests += 2
		}
	}
	count := map[string]int{}
	for _, k := range append(slices.Clone(api.got), api.queried...) {
		count[k]++
	}
	if count["VS#popular"] > 0 {
		t.Fatalf("the site's home was read %d times", count["VS#popular"])
	}
	hottest, most := "", 0
	for k, n := range count {
		if n*8 > requests {
			t.Errorf("%q read by %d of %d requests, more than an eighth", k, n, requests)
		}
		if n > most || n == most && k < hottest {
			hottest, most = k, n
		}
	}
	t.Logf("%d requests; the hottest key, %q, read by %d", requests, hottest, most)
}
