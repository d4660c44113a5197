package relay

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// debug serves the debug page: off unless configured, and per site when on.
//
// Off answers not-found rather than forbidden: no credential would work,
// and "forbidden" advertises a door that does not open. On, a missing site
// and a site the projection does not hold get the same bare bad-request, so
// the page cannot be used to ask which sites exist (and a 404 there would
// tell an audit probing without a site that there is no debug surface).
//
// Deliberate departure from the reference: it lists every site's jobs and
// every device behind any registered site id, which is the cross-tenant read
// "per-site or nothing" exists to forbid. Here the page shows only this
// site's jobs, and only the devices whose owner holds a consent record for
// it or that claimed one of its jobs.
func (r *Relay) debug(c *call, query url.Values) (reply, error) {
	if !r.cfg.Debug {
		return bare(http.StatusNotFound, protocol.CodeNotFound), nil
	}
	p, err := r.cfg.Projection.Projection(c.ctx)
	if err != nil {
		return reply{}, err
	}
	siteID, named := query["site"]
	if !named || len(siteID) == 0 {
		return bare(http.StatusBadRequest, protocol.CodeBadRequest), nil
	}
	c.site = siteID[0]
	if _, found := p.SiteFor(siteID[0]); !found {
		return bare(http.StatusBadRequest, protocol.CodeBadRequest), nil
	}
	all, err := r.store.Jobs(c.ctx)
	if err != nil {
		return reply{}, err
	}
	everyone, err := r.store.Everyone(c.ctx)
	if err != nil {
		return reply{}, err
	}
	claimers := map[string]bool{}
	var jobs []store.Job
	for _, j := range all {
		if j.SiteID != siteID[0] {
			continue
		}
		jobs = append(jobs, j)
		if j.ClaimedBy != nil {
			claimers[j.ClaimedBy.RunnerID] = true
		}
	}
	var devices []debugDevice
	for _, d := range everyone {
		_, consents := p.ConsentFor(d.Owner, siteID[0])
		if consents || claimers[d.RunnerID] {
			devices = append(devices, debugDevice{Presence: d, consents: consents})
		}
	}
	r.decide(c, "debug-page")
	return reply{status: http.StatusOK, html: debugPage(jobs, devices, r.now())}, nil
}

type debugDevice struct {
	store.Presence
	consents bool
}

var htmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")

func escape(s string) string { return htmlEscaper.Replace(s) }

var stateColour = map[store.State]string{
	store.StateQueued:          "#8a8a8a",
	store.StateAwaitingPayload: "#c98a00",
	store.StateReady:           "#0a7",
	store.StateRunning:         "#06c",
	store.StateDone:            "#444",
}

// fingerprintOf names a device the way a human would: its identity key id.
func fingerprintOf(id protocol.PublicIdentity) string {
	k, err := protocol.KeyID(id.Identity)
	if err != nil {
		return "?"
	}
	return k
}

func jobRow(job store.Job, now int64) string {
	waiting := ""
	if job.State == store.StateAwaitingPayload && job.AwaitingUntil != 0 {
		waiting = strconv.FormatInt(max(0, job.AwaitingUntil-now), 10) + "ms left"
	}
	streaming := "no"
	if job.Stub.Streaming {
		streaming = "yes"
	}
	colour, found := stateColour[job.State]
	if !found {
		colour = "#000"
	}
	claimed := "<span class='dim'>—</span>"
	if job.ClaimedBy != nil {
		claimed = "<code>" + escape(fingerprintOf(job.ClaimedBy.Device)) + "</code>"
	}
	payload := "<span class='dim'>—</span>"
	if job.Payload != nil {
		payload = "sealed"
	}
	result := "<span class='dim'>—</span>"
	if job.Result != nil {
		disposition := string(job.Disposition)
		if disposition == "" {
			disposition = "?"
		}
		result = escape(disposition)
	}
	return `<tr>
    <td><code>` + escape(job.ID) + `</code></td>
    <td>` + escape(job.Stub.Kind) + `</td>
    <td>` + escape(job.Stub.Owner) + `</td>
    <td>` + escape(job.Stub.Audience) + `</td>
    <td>` + escape(job.Stub.SizeClass) + `</td>
    <td>` + streaming + `</td>
    <td><b style="color:` + colour + `">` + escape(string(job.State)) + `</b> <span class="dim">` + escape(waiting) + `</span></td>
    <td>` + claimed + `</td>
    <td>` + payload + `</td>
    <td>` + result + `</td>
  </tr>`
}

func deviceRow(d debugDevice, now int64) string {
	routing := "active"
	if !d.consents {
		routing = "<b style='color:#c00'>no consent</b>"
	}
	return `<tr>
  <td><code>` + escape(d.RunnerID) + `</code></td>
  <td>` + escape(d.Owner) + `</td>
  <td><code>` + escape(fingerprintOf(d.Device)) + `</code></td>
  <td>` + strconv.FormatInt(max(0, now-d.LastSeenAt), 10) + `ms ago</td>
  <td>` + routing + `</td>
</tr>`
}

// debugPage renders what the relay knows about one site, which is
// everything on the page: no prompt or result text, because it holds none.
func debugPage(jobs []store.Job, devices []debugDevice, now int64) string {
	var b strings.Builder
	b.WriteString(`<!doctype html>
<html><head><meta charset="utf-8"><title>byollm relay — debug</title>
<meta http-equiv="refresh" content="1">
<style>
 body{font:13px/1.5 ui-monospace,SFMono-Regular,Menlo,monospace;margin:24px;color:#111;background:#fff}
 h1{font-size:15px;margin:0 0 4px} h2{font-size:13px;margin:24px 0 6px}
 table{border-collapse:collapse;width:100%;margin-top:4px}
 th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eee;vertical-align:top}
 th{font-weight:600;color:#666;border-bottom:1px solid #ccc}
 code{background:#f5f5f5;padding:1px 4px;border-radius:3px}
 .dim{color:#aaa} .note{color:#666;max-width:70ch;margin:8px 0 0}
 @media(prefers-color-scheme:dark){
  body{background:#111;color:#eee} th{color:#999;border-color:#333}
  td{border-color:#222} code{background:#1c1c1c} .note{color:#999}
 }
</style></head><body>
<h1>byollm relay — debug</h1>
<p class="note">Everything this relay knows, which is everything on this page.
There is no prompt or result text here because it holds none: payloads and
results are sealed to their endpoints and pass through as ciphertext.</p>

<h2>Routed jobs (` + strconv.Itoa(len(jobs)) + `)</h2>
<table>
<tr><th>job</th><th>kind</th><th>owner</th><th>audience</th><th>size</th>
    <th>stream</th><th>state</th><th>claimed by</th><th>payload</th><th>result</th></tr>
`)
	if len(jobs) == 0 {
		b.WriteString(`<tr><td colspan="10" class="dim">nothing routed yet</td></tr>`)
	}
	for i, j := range jobs {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(jobRow(j, now))
	}
	b.WriteString(`
</table>

<h2>Presence (` + strconv.Itoa(len(devices)) + `)</h2>
<table>
<tr><th>runner</th><th>owner</th><th>fingerprint</th><th>last seen</th><th>routing</th></tr>
`)
	if len(devices) == 0 {
		b.WriteString(`<tr><td colspan="5" class="dim">no devices connected</td></tr>`)
	}
	for i, d := range devices {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(deviceRow(d, now))
	}
	b.WriteString(`
</table>
</body></html>`)
	return b.String()
}
