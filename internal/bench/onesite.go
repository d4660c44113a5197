package bench

import (
	"context"
	"fmt"
)

// runOneSite is the one-site phase on a DynamoDB stack (and table) of its
// own: cfg.Daemons daemons consenting to one site, idle for
// cfg.OneSiteIdle on the fresh stack as the fleet's idle phase is, the
// site polling with nothing to list (SitePolls), then
// cfg.Warmup unmeasured lifecycles and up to cfg.OneSiteJobs measured
// ones, every job the site's.
func runOneSite(ctx context.Context, cfg Config, endpoint string, say func(string, ...any)) (*OneSitePhase, *SiteHeat, error) {
	w, err := newWorld(1, cfg.Daemons)
	if err != nil {
		return nil, nil, err
	}
	w.sites[0].id = oneSiteID
	w.grants = cfg.Grants
	say("one-site phase: a %s stack of its own, %d daemons consenting to %s…", TargetDynamo, len(w.daemons), oneSiteID)
	t, err := startDynamo(ctx, cfg.TargetCommand, endpoint, w)
	if err != nil {
		return nil, nil, fmt.Errorf("one-site target: %w", err)
	}
	defer t.close()
	one := &OneSitePhase{SiteID: oneSiteID}
	if cfg.OneSiteIdle > 0 {
		p := runIdle(ctx, t, w, cfg.OneSiteIdle)
		one.Idle = &p
		say("  one site idle: %d heartbeats, %d claims, %d failed", p.Heartbeats, p.Claims, p.Failed)
	}
	// Before any job: a stock site's polls with nothing to list.
	polls := runSitePolls(ctx, t, w.sites[0], emptyPolls)
	one.EmptyPolls = &polls
	say("  one site's empty polls: %d of pending and of results, %d failed", polls.Polls, polls.Failed)
	if cfg.Warmup > 0 {
		runPhase(ctx, t, w, phaseSpec{label: "one site warm-up", jobs: cfg.Warmup, tag: "onewarm", deadline: cfg.JobDeadline, limit: cfg.OneSiteLimit, progress: cfg.Progress})
	}
	one.Lifecycle = runPhase(ctx, t, w, phaseSpec{label: "one site", jobs: cfg.OneSiteJobs, tag: "one",
		deadline: cfg.JobDeadline, limit: cfg.OneSiteLimit, progress: cfg.Progress})
	if one.Lifecycle.Jobs == 0 {
		return nil, nil, fmt.Errorf("the one-site phase completed no job: %v", one.Lifecycle.Errors)
	}
	say("  one site: %.1f jobs/s, %d jobs, %d failed", one.Lifecycle.JobsPerSecond, one.Lifecycle.Jobs, one.Lifecycle.Failed)
	return one, siteHeat(w, one), ctx.Err()
}
