package dynamo

import (
	"context"
	"testing"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/internal/sitestore/sitestoretest"
	"github.com/byorelay/byorelay/localtest"
)

func TestMain(m *testing.M) { localtest.Main(m) }

// newTable creates a uniquely named site table on DynamoDB Local.
func newTable(t testing.TB) string {
	t.Helper()
	name := localtest.UniqueName("site")
	if err := CreateTable(context.Background(), localtest.DynamoClient(t), name); err != nil {
		t.Fatal(err)
	}
	return name
}

// replica is one more store over table with its own client: another Lambda
// instance.
func replica(t testing.TB, table string, clk clock.Clock, wrap func(ddb.API) ddb.API) *Store {
	t.Helper()
	var db ddb.API = localtest.DynamoClient(t)
	if wrap != nil {
		db = wrap(db)
	}
	s, err := New(Config{DB: db, Table: table, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDynamoStoreOnDynamoDBLocalPassesTheSuite(t *testing.T) {
	sitestoretest.Run(t, sitestoretest.Harness{
		New: func(t *testing.T, clk *clock.Manual) sitestore.Store {
			return replica(t, newTable(t), clk, nil)
		},
	})
}
