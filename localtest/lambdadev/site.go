package lambdadev

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/internal/sitefn"
	"github.com/byorelay/byorelay/internal/sitepump"
	"github.com/byorelay/byorelay/localtest/demo"
)

// PrepareSiteEvent is PrepareEvent for a site-stack function: an HTTP
// event gets the demo's values, leaseID for {{leaseId}} (demo.SiteLease)
// and fresh signatures; the sweeper's schedule payload goes as it is.
func PrepareSiteEvent(f sitefn.Function, raw []byte, w *demo.World, now time.Time, leaseID string) ([]byte, error) {
	return prepare(f.Name, f.Kind == sitefn.KindHTTP, raw, w, now, leaseID)
}

// InvokeSiteInProcess runs one event through a site function's handler in
// this process, on st. The answer is the JSON the function would have
// returned.
func InvokeSiteInProcess(ctx context.Context, st *sitefn.Stack, f sitefn.Function, event []byte) ([]byte, error) {
	if f.Kind == sitefn.KindPump {
		h, err := st.PumpHandler()
		if err != nil {
			return nil, err
		}
		var ev sitepump.Event
		if err := json.Unmarshal(event, &ev); err != nil {
			return nil, err
		}
		rep, err := h(ctx, ev)
		if err != nil {
			return nil, err
		}
		return json.Marshal(rep)
	}
	if f.Kind == sitefn.KindSchedule {
		rep, err := st.SweepHandler()(ctx)
		if err != nil {
			return nil, err
		}
		return json.Marshal(rep)
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(event, &ev); err != nil {
		return nil, err
	}
	h, err := st.Handler(f.Name)
	if err != nil {
		return nil, err
	}
	resp, err := h(ctx, ev)
	if err != nil {
		return nil, err
	}
	return json.Marshal(resp)
}

// OpenDemoSite is the site demo world on table, in this process: the
// table created if it is not there, a site stack opened with sitefn's own
// wiring and the demo site's keys, and the demo daemon and job seeded
// (demo.World.SeedSite).
func OpenDemoSite(ctx context.Context, w *demo.World, db SiteDB, table string) (*sitefn.Stack, error) {
	if err := demo.CreateSiteTable(ctx, db, table); err != nil {
		return nil, err
	}
	st, err := sitefn.Open(sitefn.Env{TableName: table, VerificationURL: demo.SiteVerificationURL},
		sitefn.Options{DB: db, Keys: w.Site, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	srv, err := st.Server(ctx)
	if err != nil {
		return nil, err
	}
	if err := w.SeedSite(ctx, srv, st.Store); err != nil {
		return nil, err
	}
	return st, nil
}

// SiteDB is what OpenDemoSite needs from a DynamoDB client.
type SiteDB interface {
	ddb.API
	ddb.TableCreator
}
