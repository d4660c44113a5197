package main

import (
	"context"
	"encoding/json"

	"github.com/byorelay/byorelay/siteserver"
	"github.com/byorelay/byorelay/sitestore"
)

// directLane is the site serving its users' daemons itself: the site app
// (siteserver.Server) over a job store, with the daemon endpoints mounted
// at /byollm/ on the same origin.
type directLane struct {
	app   *siteserver.Server
	store sitestore.Store
}

func (d directLane) Ask(ctx context.Context, owner, prompt string) (string, error) {
	payload, err := json.Marshal(map[string]string{"prompt": prompt})
	if err != nil {
		return "", err
	}
	j, err := d.app.Enqueue(ctx, siteserver.EnqueueInput{Kind: "llm.generate", Payload: payload, Owner: owner})
	return j.ID, err
}

func (d directLane) View(ctx context.Context, owner, jobID string) (JobView, bool, error) {
	j, found, err := d.app.Job(ctx, jobID)
	if err != nil || !found || j.Owner != owner {
		return JobView{}, false, err
	}
	v := JobView{ID: j.ID, State: j.State, Done: j.Terminal() || j.State == sitestore.StateExpired}
	if o := j.Outcome; o != nil {
		if o.Text != nil {
			v.Answer = *o.Text
		}
		if o.Outcome != "ok" {
			v.Error = o.Code + ": " + o.Message
		}
	}
	return v, true, nil
}

func (d directLane) Subscribe(jobID string, onChange func()) func() {
	return d.store.Subscribe(jobID, onChange)
}

func (d directLane) pair(ctx context.Context, userCode, owner string) (string, error) {
	r, err := d.app.ApprovePairing(ctx, userCode, owner)
	return r.ID, err
}
