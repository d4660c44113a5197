package main

import (
	"context"
	"sync"
	"time"

	site "github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/sitestore"
)

// cloudLane is the site publishing through a relay (client/site): the
// relay routes stubs to its users' daemons, the site seals each payload to
// whichever device claimed it and opens the sealed results.
type cloudLane struct {
	site  *site.Client
	ttl   time.Duration
	watch sitestore.Watchers

	mu   sync.Mutex
	jobs map[string]*JobView
	// owners says whose each job is.
	owners map[string]string
}

func newCloudLane(c *site.Client, ttl time.Duration) *cloudLane {
	return &cloudLane{site: c, ttl: ttl, jobs: map[string]*JobView{}, owners: map[string]string{}}
}

func (c *cloudLane) Ask(ctx context.Context, owner, prompt string) (string, error) {
	id := sitestore.NewID()
	c.mu.Lock()
	c.jobs[id] = &JobView{ID: id, State: sitestore.StateQueued}
	c.owners[id] = owner
	c.mu.Unlock()
	stub := protocol.JobStub{ID: id, Kind: "llm.generate", Owner: owner, DeadlineAt: time.Now().Add(c.ttl).UnixMilli()}
	if _, err := c.site.Publish(ctx, stub, site.Payload{Prompt: prompt}); err != nil {
		c.mu.Lock()
		delete(c.jobs, id)
		delete(c.owners, id)
		c.mu.Unlock()
		return "", err
	}
	return id, nil
}

func (c *cloudLane) View(_ context.Context, owner, jobID string) (JobView, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, found := c.jobs[jobID]
	if !found || c.owners[jobID] != owner {
		return JobView{}, false, nil
	}
	return *v, true, nil
}

func (c *cloudLane) Subscribe(jobID string, onChange func()) func() {
	return c.watch.Subscribe(jobID, onChange)
}

// run pumps the relay until ctx ends: seal for every claim, collect every
// fate.
func (c *cloudLane) run(ctx context.Context) error {
	return c.site.Run(ctx, 250*time.Millisecond, c.deliver)
}

func (c *cloudLane) deliver(rep site.Report) {
	var changed []string
	c.mu.Lock()
	for _, id := range rep.Sealed {
		if v, ok := c.jobs[id]; ok && !v.Done {
			v.State = sitestore.StateClaimed
			changed = append(changed, id)
		}
	}
	for _, e := range rep.Ended {
		v, ok := c.jobs[e.JobID]
		if !ok {
			continue
		}
		v.Done = true
		switch {
		case e.Fate == site.FateVerified && e.Result.Outcome.Outcome == site.OutcomeOK:
			v.State = sitestore.StateOK
			if e.Result.Outcome.Text != nil {
				v.Answer = *e.Result.Outcome.Text
			}
		case e.Fate == site.FateVerified:
			v.State = sitestore.StateError
			v.Error = e.Result.Outcome.Code + ": " + e.Result.Outcome.Message
		default:
			v.State = string(e.Fate)
			v.Error = e.Reason
		}
		changed = append(changed, e.JobID)
	}
	c.mu.Unlock()
	for _, id := range changed {
		c.watch.Notify(id)
	}
}
