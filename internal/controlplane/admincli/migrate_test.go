package admincli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/controlplane/admincli"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store/dynamo"
)

func TestMain(m *testing.M) { localtest.Main(m) }

// writeLegacyDocument stores f the way a deployment before records kept
// it: one version item and the document's JSON in chunks under
// V#projection.
func writeLegacyDocument(t *testing.T, db *dynamodb.Client, table string, f projection.Fixture) {
	t.Helper()
	data, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	const ver, chunk = 7, 1000
	var writes []types.TransactWriteItem
	n := 0
	for off := 0; off < len(data); off += chunk {
		writes = append(writes, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(table), Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "V#projection"},
			"sk": &types.AttributeValueMemberS{Value: fmt.Sprintf("F#%020d#%04d", ver, n)},
			"d":  &types.AttributeValueMemberB{Value: data[off:min(off+chunk, len(data))]},
		}}})
		n++
	}
	writes = append(writes, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "V#projection"}, "sk": &types.AttributeValueMemberS{Value: "V"},
		"ver": &types.AttributeValueMemberN{Value: fmt.Sprint(ver)}, "chunks": &types.AttributeValueMemberN{Value: fmt.Sprint(n)},
		"prev": &types.AttributeValueMemberN{Value: "6"}, "prevChunks": &types.AttributeValueMemberN{Value: "0"},
	}}})
	if _, err := db.TransactWriteItems(context.Background(), &dynamodb.TransactWriteItemsInput{TransactItems: writes}); err != nil {
		t.Fatal(err)
	}
}

// An upgrade as the README runs it: `byorelay admin migrate` copies a live
// document into records while the document stays for the old relay, and
// --drop-legacy removes it after the new version is deployed.
func TestMigrateCopiesALiveDocumentIntoRecords(t *testing.T) {
	ctx := t.Context()
	endpoint := localtest.DynamoEndpoint(t)
	localtest.LambdaEnv(t, map[string]string{"dynamodb": endpoint})
	db := localtest.DynamoClient(t)
	table := localtest.UniqueName("migrate")
	if err := dynamo.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	site, device := mustKeys(t), mustKeys(t)
	f := projection.EmptyFixture()
	f.Sites = []projection.SiteRecord{{SiteID: "site-a", Site: site.Public()}}
	f.Consents = []projection.ConsentRecord{{Owner: "alice", SiteID: "site-a"}}
	f.Devices = []projection.DeviceRecord{{Owner: "alice", RunnerID: "r1", Device: device.Public()}}
	f.Rosters = []projection.RosterRecord{{ID: "team", Owner: "alice", Members: []string{"bob"}}}
	writeLegacyDocument(t, db, table, f)

	run := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := admincli.Run(ctx, append([]string{"migrate", "--table", table}, args...), &stdout, &stderr); code != 0 {
			t.Fatalf("migrate %v: exit %d: %s", args, code, stderr.String())
		}
		return stdout.String()
	}
	out := run()
	if !strings.Contains(out, "copied the projection document into 4 records") {
		t.Fatalf("migrate said %q", out)
	}
	p, err := controlplane.NewStore(controlplane.NewDynamoStorage(db, table)).Scoped(ctx, projection.Query{RunnerID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if !p.MayRouteFor("alice", "site-a") || !p.MayRunFor("alice", "bob") {
		t.Fatal("the migrated records do not route as the document did")
	}
	if _, found, err := controlplane.LegacyDocument(ctx, db, table); err != nil || !found {
		t.Fatalf("the document must stay until --drop-legacy: found %v, %v", found, err)
	}
	// Run again (the README says to, right before deploying): the same
	// records, nothing doubled.
	run()
	back, err := controlplane.NewStore(controlplane.NewDynamoStorage(db, table)).Fixture(ctx)
	if err != nil || len(back.Devices) != 1 || len(back.Consents) != 1 || len(back.Rosters) != 1 {
		t.Fatalf("after a second migrate: %+v %v", back, err)
	}
	if out := run("--drop-legacy"); !strings.Contains(out, "deleted the document's") {
		t.Fatalf("migrate --drop-legacy said %q", out)
	}
	if _, found, _ := controlplane.LegacyDocument(ctx, db, table); found {
		t.Fatal("the document is still there after --drop-legacy")
	}
	back, err = controlplane.NewStore(controlplane.NewDynamoStorage(db, table)).Fixture(ctx)
	if err != nil || len(back.Devices) != 1 {
		t.Fatalf("--drop-legacy touched the records: %+v %v", back, err)
	}
	if out := run(); !strings.Contains(out, "nothing to copy") {
		t.Fatalf("a migrate with no document said %q", out)
	}
}

func mustKeys(t *testing.T) *protocol.Keys {
	t.Helper()
	k, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	return k
}
