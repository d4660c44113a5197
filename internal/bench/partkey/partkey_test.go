package partkey

import (
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/controlplane"
)

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": s(pk), "sk": s(sk)}
}

// Every input shape the store and the control plane send, with the
// partition key(s) the meter must name for it.
func TestOfNamesEveryPartitionACallTouches(t *testing.T) {
	cases := []struct {
		name string
		in   any
		want []string
	}{
		{"GetItem", &dynamodb.GetItemInput{Key: key("V#projection", "v")}, []string{"V#projection"}},
		{"PutItem, NUL separators printed as /", &dynamodb.PutItemInput{Item: map[string]types.AttributeValue{
			"pk": s("J#site-a\x00job-1"), "sk": s("j"), "qk": s("q")}}, []string{"J#site-a/job-1"}},
		{"UpdateItem", &dynamodb.UpdateItemInput{Key: key("P#runner-1", "p")}, []string{"P#runner-1"}},
		{"DeleteItem", &dynamodb.DeleteItemInput{Key: key("J#job-2", "j")}, []string{"J#job-2"}},
		{"Query on the table", &dynamodb.QueryInput{
			KeyConditionExpression:    aws.String("pk = :pk AND begins_with(sk, :p)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s("V#projection"), ":p": s("c")},
		}, []string{"V#projection"}},
		{"Query on an index, attribute name by placeholder", &dynamodb.QueryInput{
			IndexName:                 aws.String("queue"),
			KeyConditionExpression:    aws.String("#q = :qk"),
			ExpressionAttributeNames:  map[string]string{"#q": "qk"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":qk": s("owner-1\x00cap"), ":now": &types.AttributeValueMemberN{Value: "1"}},
		}, []string{"queue:owner-1/cap"}},
		{"Query on an index with a range condition", &dynamodb.QueryInput{
			IndexName:              aws.String("due"),
			KeyConditionExpression: aws.String("dk = :dk AND du > :since"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":dk": s("F#site-a"), ":since": &types.AttributeValueMemberN{Value: "5"}},
		}, []string{"due:F#site-a"}},
		{"Query of a site's shard", &dynamodb.QueryInput{
			KeyConditionExpression:    aws.String("pk = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s("U#site-a\x007")},
		}, []string{"U#site-a/7"}},
		{"TransactWriteItems", &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Put: &types.Put{Item: key("J#job-3", "j")}},
			{Update: &types.Update{Key: key("O#owner-1", "o")}},
			{Delete: &types.Delete{Key: key("J#job-4", "j")}},
			{ConditionCheck: &types.ConditionCheck{Key: key("V#projection", "v")}},
		}}, []string{"J#job-3", "O#owner-1", "J#job-4", "V#projection"}},
		{"TransactGetItems", &dynamodb.TransactGetItemsInput{TransactItems: []types.TransactGetItem{
			{Get: &types.Get{Key: key("V#projection", "v")}}, {Get: &types.Get{Key: key("V#projection", "c0")}},
		}}, []string{"V#projection", "V#projection"}},
		{"BatchGetItem", &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
			"t": {Keys: []map[string]types.AttributeValue{key("J#a", "j"), key("J#b", "j")}},
		}}, []string{"J#a", "J#b"}},
		{"BatchWriteItem", &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{
			"t": {{PutRequest: &types.PutRequest{Item: key("V#projection", "c1")}}, {DeleteRequest: &types.DeleteRequest{Key: key("J#c", "j")}}},
		}}, []string{"V#projection", "J#c"}},
		{"a Scan has no partition", &dynamodb.ScanInput{}, []string{Scan}},
		{"a Query without the partition equality", &dynamodb.QueryInput{IndexName: aws.String("queue"),
			KeyConditionExpression: aws.String("pk = :pk"), ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s("x")}}, []string{Unknown}},
	}
	for _, c := range cases {
		got := Of(c.in)
		slices.Sort(got)
		want := slices.Clone(c.want)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: keys %q, want %q", c.name, got, want)
		}
	}
}

// A write touches its items' partitions and the index partitions it puts
// entries into, each named once however many items share it; an entry it
// removes names no partition.
func TestTouchedIsItemsAndIndexEntriesOnce(t *testing.T) {
	in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{Item: map[string]types.AttributeValue{"pk": s("J#a"), "sk": s("j"), "qk": s("owner-1"), "lk": s("site-a")}}},
		{Update: &types.Update{Key: key("J#a", "x"), UpdateExpression: aws.String("SET #d = :dk, du = :du REMOVE qk"),
			ExpressionAttributeNames:  map[string]string{"#d": "dk"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":dk": s("D#0"), ":du": &types.AttributeValueMemberN{Value: "1"}}}},
		{ConditionCheck: &types.ConditionCheck{Key: key("O#owner-1", "o")}},
		{Update: &types.Update{Key: key("O#owner-1", "o"), UpdateExpression: aws.String("REMOVE lk")}},
	}}
	got := Touched(in)
	slices.Sort(got)
	want := []string{"J#a", "O#owner-1", "due:D#0", "queue:owner-1", "sitelist:site-a"}
	if !slices.Equal(got, want) {
		t.Errorf("touched %q, want %q", got, want)
	}
	if got := Touched(&dynamodb.ScanInput{}); !slices.Equal(got, []string{Scan}) {
		t.Errorf("a Scan touched %q, want %q", got, Scan)
	}
	if got := Touched(&dynamodb.DescribeTableInput{}); len(got) != 0 {
		t.Errorf("a table description touched %q, want nothing", got)
	}
}

// A shard family's members are named by what comes before their shard
// number, so one site's shards group apart from another's, and a key that
// merely ends in digits (a site id) is no member.
func TestFamilyOfGroupsShardsByWhatTheyShard(t *testing.T) {
	saved := Families
	t.Cleanup(func() { Families = saved })
	Families = append(slices.Clone(saved), Family{Prefix: "VS#", Shards: 8})
	cases := []struct {
		key, name string
		shards    int
	}{
		{"due:D#17", "due:D#*", Families[0].Shards},
		{"CLOCK#probe#146", "CLOCK#probe#*", Families[3].Shards},
		{"VS#site-01#3", "VS#site-01#*", 8},
		{"VS#site-01/12", "VS#site-01/*", 8},
		{"VS#site-02#3", "VS#site-02#*", 8},
		{Name("", "VSC#site-a\x0017"), "VSC#site-a/*", controlplane.DefaultSiteCopies},
		{Name("", "VSC#a/b\x000"), "VSC#a/b/*", controlplane.DefaultSiteCopies},
		{Name("", "VSC#site-a\x00"), "", 0},
		{Name("", "VSC#site-a\x001x"), "", 0},
		{"due:D#7x", "", 0},     // not a shard number
		{"due:D#", "", 0},       // no shard number
		{"VS#site-01", "", 0},   // a site id's digits are not a shard number
		{"V#projection", "", 0}, // no family
	}
	for _, c := range cases {
		name, shards, ok := FamilyOf(c.key)
		if ok != (c.name != "") || name != c.name || shards != c.shards {
			t.Errorf("FamilyOf(%q) = %q, %d, %v; want %q, %d", c.key, name, shards, ok, c.name, c.shards)
		}
	}
}
