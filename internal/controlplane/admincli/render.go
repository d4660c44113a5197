package admincli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
)

// printer prints one command's answer: for a person by default (a table,
// or a sentence for a change), or with --json the API's answer as it came,
// indented, for scripts.
type printer struct {
	w io.Writer
	// progress is where a long command says how far it is (stderr), so
	// its answer on w stays what a script reads.
	progress io.Writer
	json     bool
	// raw is the answer's body exactly as the API sent it (see
	// controlplane.Client.WithAnswer).
	raw []byte
	// now is the local clock, for the answers that carry no clock of the
	// control plane's own; tests fix it.
	now func() time.Time
}

// show prints the answer: raw JSON with --json, else what human writes.
func (p *printer) show(human func(w io.Writer) error) error {
	if p.json {
		return p.printRaw()
	}
	return human(p.w)
}

// printRaw prints the API's answer indented, with a final newline. Only
// whitespace differs from what the API sent: a script that reads it sees
// every field the API sent, in its order, whatever this client knows.
func (p *printer) printRaw() error {
	var out bytes.Buffer
	// Indent keeps the answer's own trailing newline; one is added below.
	if err := json.Indent(&out, bytes.TrimRight(p.raw, " \t\r\n"), "", "  "); err != nil {
		return fmt.Errorf("the answer is not JSON: %w", err)
	}
	out.WriteByte('\n')
	_, err := p.w.Write(out.Bytes())
	return err
}

// relative says how far at (epoch ms) is from now (epoch ms), as a person
// reads it: "expires in 9 min", "expired 2 min ago".
func relative(at, now int64) string {
	d := time.Duration(at-now) * time.Millisecond
	if d >= 0 {
		return "expires in " + roughly(d)
	}
	return "expired " + roughly(-d) + " ago"
}

// roughly is d in the largest unit that reads well: "40 s", "9 min",
// "3 h", "2 d". A code's minutes are what an operator acts on, so minutes
// are rounded down: "expires in 9 min" never means 8 min 10 s.
func roughly(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h", int(d/time.Hour))
	default:
		return fmt.Sprintf("%d d", int(d/(24*time.Hour)))
	}
}

// orDash keeps an empty cell visible in an aligned table.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// capabilities is a device's offer in one cell: each capability as
// kind:model (or kind:service when it names no model), "-" for none.
func capabilities(caps []protocol.Capability) string {
	parts := make([]string, 0, len(caps))
	for _, c := range caps {
		what := c.Model
		if what == "" {
			what = c.Service
		}
		if what == "" {
			parts = append(parts, c.Kind)
			continue
		}
		parts = append(parts, c.Kind+":"+what)
	}
	return orDash(strings.Join(parts, ", "))
}

// pairingStatus is what an operator may still do with a code.
func pairingStatus(p controlplane.Pairing) string {
	if p.ApprovedAs != "" {
		return "approved as " + p.ApprovedAs
	}
	return "pending"
}

// renderPairings is `byorelay admin pairings`: one row per pending pairing,
// newest first, its expiry told against the control plane's clock.
func renderPairings(w io.Writer, res controlplane.PendingPairingsResponse) error {
	if len(res.Pairings) == 0 {
		_, err := fmt.Fprintln(w, "no pending pairings (a daemon asks with `byollm connect`; its code shows here)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CODE\tKEY ID\tLABEL\tPLATFORM\tDAEMON\tCAPABILITIES\tEXPIRES\tSTATUS")
	for _, p := range res.Pairings {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.UserCode, p.Fingerprint, orDash(p.Label), orDash(p.Platform),
			orDash(p.DaemonVersion), capabilities(p.Capabilities), relative(p.ExpiresAt, res.Now), pairingStatus(p))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if res.More {
		fmt.Fprintf(w, "more are pending than listed (at most %d are); any of them is found by its code: byorelay admin pairing CODE\n", controlplane.MaxListedPairings)
	}
	_, err := fmt.Fprintln(w, "check a key id against the fingerprint its daemon printed, then: byorelay admin approve CODE --owner OWNER")
	return err
}

// renderPairing is `byorelay admin pairing CODE`: one pairing, a field a
// line. The answer carries no clock, so its expiry is told against now.
func renderPairing(w io.Writer, p controlplane.Pairing, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "code\t%s\n", p.UserCode)
	fmt.Fprintf(tw, "key id\t%s\n", p.Fingerprint)
	fmt.Fprintf(tw, "label\t%s\n", orDash(p.Label))
	fmt.Fprintf(tw, "platform\t%s\n", orDash(p.Platform))
	fmt.Fprintf(tw, "daemon\t%s\n", orDash(p.DaemonVersion))
	fmt.Fprintf(tw, "capabilities\t%s\n", capabilities(p.Capabilities))
	fmt.Fprintf(tw, "expires\t%s\n", relative(p.ExpiresAt, now.UnixMilli()))
	fmt.Fprintf(tw, "status\t%s\n", pairingStatus(p))
	if err := tw.Flush(); err != nil {
		return err
	}
	if p.ApprovedAs != "" {
		_, err := fmt.Fprintln(w, "approved: the daemon is let in on its next poll")
		return err
	}
	_, err := fmt.Fprintf(w, "check the key id against the fingerprint the daemon printed, then: byorelay admin approve %s --owner OWNER (or deny %s)\n", p.UserCode, p.UserCode)
	return err
}

// renderDevice is approve's and revoke-device's answer.
func renderDevice(w io.Writer, verb string, res controlplane.DeviceResponse) error {
	keyID, err := protocol.KeyID(res.Device.Device.Identity)
	if err != nil {
		keyID = "?"
	}
	about := ""
	if res.Label != "" || res.Platform != "" {
		about = fmt.Sprintf(" (%s, %s)", orDash(res.Label), orDash(res.Platform))
	}
	_, err = fmt.Fprintf(w, "%s device %s%s: owner %s, key id %s; projection version %d\n",
		verb, res.Device.RunnerID, about, res.Device.Owner, keyID, res.Version)
	return err
}

// renderDenied is deny's answer: the pairing that was refused.
func renderDenied(w io.Writer, p controlplane.Pairing) error {
	_, err := fmt.Fprintf(w, "denied %s (key id %s, %s, %s): the code no longer resolves\n",
		p.UserCode, p.Fingerprint, orDash(p.Label), orDash(p.Platform))
	return err
}

// renderConsent is a consent change's answer: the consent's state after it.
func renderConsent(w io.Writer, res controlplane.ConsentResponse) error {
	state := "active: jobs route"
	switch {
	case res.Consent.Revoked:
		state = "revoked: nothing routes"
	case res.Consent.Paused:
		state = "paused: nothing routes until resumed"
	}
	_, err := fmt.Fprintf(w, "consent owner %s, site %s: %s; projection version %d\n", res.Consent.Owner, res.Consent.SiteID, state, res.Version)
	return err
}

// renderMappings is map's and unmap's answer: the consent's mappings
// after the change, one slot a line.
func renderMappings(w io.Writer, res controlplane.MappingsResponse) error {
	if _, err := fmt.Fprintf(w, "mappings of %s at site %s (%d); projection version %d\n", res.Owner, res.SiteID, len(res.Mappings), res.Version); err != nil {
		return err
	}
	for _, m := range res.Mappings {
		owner := m.ServiceOwner
		if owner == "" {
			owner = res.Owner
		}
		if _, err := fmt.Fprintf(w, "  purpose %s, kind %s -> service %s of %s\n", m.Purpose, m.Kind, m.Service, owner); err != nil {
			return err
		}
	}
	return nil
}

// renderMapUnique is map-unique's answer: a line a slot.
func renderMapUnique(w io.Writer, res controlplane.MapUniqueResponse) error {
	verb := "mapped"
	if res.DryRun {
		verb = "would map"
	}
	for _, s := range res.Mapped {
		if _, err := fmt.Fprintf(w, "%s: %s at %s, purpose %s, kind %s -> service %s\n", verb, s.Owner, s.SiteID, s.Purpose, s.Kind, s.Service); err != nil {
			return err
		}
	}
	for _, s := range res.Left {
		why := "no device of theirs advertises a service for it"
		if len(s.Offered) > 1 {
			why = "their devices offer " + strings.Join(s.Offered, ", ") + ": theirs to choose"
		}
		if _, err := fmt.Fprintf(w, "left: %s at %s, purpose %s, kind %s (%s)\n", s.Owner, s.SiteID, s.Purpose, s.Kind, why); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "%d slot(s) %s, %d left unmapped\n", len(res.Mapped), verb, len(res.Left))
	return err
}

// renderPerson is person's answer.
func renderPerson(w io.Writer, res controlplane.PersonResponse) error {
	fmt.Fprintf(w, "person %s; teammates (whose devices may run their work): %s\n", res.Owner, orDash(strings.Join(res.Teammates, ", ")))
	for _, s := range res.Sites {
		state := ""
		if s.Paused {
			state = " (paused)"
		}
		fmt.Fprintf(w, "site %s%s\n", s.SiteID, state)
		if len(s.Mappings) == 0 {
			fmt.Fprintln(w, "  no mappings")
		}
		for _, m := range s.Mappings {
			owner := m.ServiceOwner
			if owner == "" {
				owner = res.Owner
			}
			fmt.Fprintf(w, "  purpose %s, kind %s -> service %s of %s\n", m.Purpose, m.Kind, m.Service, owner)
		}
		for _, j := range s.Waiting {
			var could []string
			for _, c := range j.Candidates {
				could = append(could, c.Service+" of "+c.Owner)
			}
			fmt.Fprintf(w, "  waiting, unmapped: job %s (purpose %s, kind %s); could answer it: %s\n", j.JobID, j.Purpose, j.Kind, orDash(strings.Join(slices.Compact(could), ", ")))
		}
		if s.MoreWaiting {
			fmt.Fprintf(w, "  (more queued jobs than the %d read)\n", controlplane.MaxListedWaiting)
		}
	}
	for _, svc := range res.Services {
		live := "not seen lately"
		if svc.Live {
			live = "live"
		}
		fmt.Fprintf(w, "service %s of %s for %s on %s, offered %s, %s\n", svc.Service, svc.Owner, svc.Kind, svc.RunnerID, svc.OfferScope, live)
	}
	return nil
}

// renderPurposes is site purposes' answer.
func renderPurposes(w io.Writer, res controlplane.SiteResponse) error {
	declared := "every purpose"
	if len(res.Site.Purposes) > 0 {
		declared = strings.Join(res.Site.Purposes, ", ")
	}
	_, err := fmt.Fprintf(w, "site %s declares %s; projection version %d\n", res.Site.SiteID, declared, res.Version)
	return err
}

// renderSite is site add's and site rotate's answer.
func renderSite(w io.Writer, verb string, res controlplane.SiteResponse, now time.Time) error {
	keyID, err := protocol.KeyID(res.Site.Site.Identity)
	if err != nil {
		keyID = "?"
	}
	line := fmt.Sprintf("%s site %s: key id %s", verb, res.Site.SiteID, keyID)
	if n := len(res.Site.Succeeds); n > 0 {
		line += fmt.Sprintf(", %d succession link(s)", n)
	}
	if res.Site.RetiringUntil > 0 {
		line += fmt.Sprintf(", the retired key signs work until %s (%s)",
			time.UnixMilli(res.Site.RetiringUntil).UTC().Format(time.RFC3339), strings.TrimPrefix(relative(res.Site.RetiringUntil, now.UnixMilli()), "expires "))
	}
	_, err = fmt.Fprintf(w, "%s; projection version %d\n", line, res.Version)
	return err
}

// renderRoster is roster set's answer.
func renderRoster(w io.Writer, r projection.RosterRecord, version int64) error {
	members := orDash(strings.Join(r.Members, ", "))
	_, err := fmt.Fprintf(w, "roster %s: owner %s, members %s; projection version %d\n", r.ID, r.Owner, members, version)
	return err
}
