package main

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/byorelay/byorelay/internal/siteserver"
	"github.com/byorelay/byorelay/internal/sitestore"
)

// appLane is the site app (siteserver.Server) behind the page, on either
// lane: the same calls whether the site serves daemons itself or publishes
// through a relay.
type appLane struct {
	app *siteserver.Server
	// stream publishes each job as a live stream (-stream, cloud lane).
	stream bool
}

// live is the cloud lane's stream of a job's answer as it is produced,
// authorised for the job's owner only: another person's job, and one that
// does not exist, are the same refusal.
func (a appLane) live(owner string) (http.Handler, error) {
	return a.app.StreamHandler(func(r *http.Request, jobID string) bool {
		j, found, err := a.app.Job(r.Context(), jobID)
		return err == nil && found && j.Owner == owner
	})
}

func (a appLane) Ask(ctx context.Context, owner, prompt string) (string, error) {
	payload, err := json.Marshal(map[string]string{"prompt": prompt})
	if err != nil {
		return "", err
	}
	// Whole unless the deployer says its people's devices stream: the
	// relay offers a streaming job only to a device that opts in, and
	// neither the site nor the relay's site plane can tell who will claim
	// (docs/decisions/0022-cloud-lane-jobs.md). A job published whole is
	// taken by every daemon, one that streams included.
	j, err := a.app.Enqueue(ctx, siteserver.EnqueueInput{Kind: "llm.generate", Payload: payload, Owner: owner,
		Streaming: a.stream && a.app.Lane() == siteserver.LaneCloud})
	return j.ID, err
}

func (a appLane) View(ctx context.Context, owner, jobID string) (JobView, bool, error) {
	j, found, err := a.app.Job(ctx, jobID)
	// Another person's job reads exactly like one that does not exist.
	if err != nil || !found || j.Owner != owner {
		return JobView{}, false, err
	}
	v := JobView{ID: j.ID, State: j.State, Done: j.Terminal() || j.State == sitestore.StateExpired,
		Waiting: siteserver.Waiting(j, time.Now().UnixMilli())}
	if o := j.Outcome; o != nil {
		if o.Text != nil {
			v.Answer = *o.Text
		}
		if o.Outcome != "ok" {
			v.Error = o.Code + ": " + o.Message
		}
	}
	if v.Error == "" && j.EndReason != "" {
		v.Error = j.EndReason
	}
	return v, true, nil
}

func (a appLane) Subscribe(jobID string, onChange func()) func() {
	return a.app.Subscribe(jobID, onChange)
}

func (a appLane) pair(ctx context.Context, userCode, owner string) (string, error) {
	r, err := a.app.ApprovePairing(ctx, userCode, owner)
	return r.ID, err
}
