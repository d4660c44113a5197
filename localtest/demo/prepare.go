package demo

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/byorelay/byorelay/protocol"
)

// Placeholders a sample event's body may hold, filled in by Prepare. They
// stand for values that depend on keys generated on this machine, or on
// the time of the invoke.
const (
	PlaceholderSiteKeyID       = "{{siteKeyId}}"
	PlaceholderDevice          = "{{device}}"
	PlaceholderDeadlineAt      = "{{deadlineAt}}"
	PlaceholderPayloadEnvelope = "{{payloadEnvelope}}"
	PlaceholderResultEnvelope  = "{{resultEnvelope}}"
	// PlaceholderLeaseID is the lease the demo daemon holds on JobID
	// (RelayLease, SiteLease), filled in by PrepareWithLease only.
	PlaceholderLeaseID = "{{leaseId}}"
)

// Deadline is the deadlineAt Prepare writes: the top of the hour after next,
// so every event prepared within one test run names the same deadline (a
// site's stub and its envelopes agree on it), and it is always at least an
// hour away.
func Deadline(now time.Time) int64 {
	return now.Truncate(time.Hour).Add(2 * time.Hour).UnixMilli()
}

// Prepare makes a sample event sendable at now: placeholders in the body
// are filled in, then a request whose caller header names a demo identity
// (x-byollm-runner: runner-demo, x-byollm-site: demo-site) is re-stamped
// and re-signed over the final body bytes. A base64 body is decoded,
// filled and re-encoded, so it still arrives as API Gateway would send it.
// Requests naming anyone else are left as they are.
func (w *World) Prepare(ev *events.APIGatewayV2HTTPRequest, now time.Time) error {
	return w.prepare(ev, now, nil)
}

// PrepareWithLease is Prepare for a sample event that may also name
// {{leaseId}}: leaseID, the lease the demo daemon holds on JobID in the
// table the event goes to (RelayLease, SiteLease), so fetch, result,
// heartbeat and release name the grant a claim just made.
func (w *World) PrepareWithLease(ev *events.APIGatewayV2HTTPRequest, now time.Time, leaseID string) error {
	return w.prepare(ev, now, []string{PlaceholderLeaseID, leaseID})
}

func (w *World) prepare(ev *events.APIGatewayV2HTTPRequest, now time.Time, extra []string) error {
	body := []byte(ev.Body)
	if ev.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(ev.Body)
		if err != nil {
			return fmt.Errorf("demo: event body: %w", err)
		}
		body = b
	}
	body, err := w.fill(body, now, extra)
	if err != nil {
		return err
	}
	if ev.IsBase64Encoded {
		ev.Body = base64.StdEncoding.EncodeToString(body)
	} else {
		ev.Body = string(body)
	}
	if ev.Headers == nil {
		return nil
	}
	if _, ok := ev.Headers["content-length"]; ok {
		ev.Headers["content-length"] = strconv.Itoa(len(body))
	}
	path := ev.RawPath
	endpoint := path[strings.LastIndex(path, "/")+1:]
	at := now.UnixMilli()
	var sig protocol.RequestSignature
	switch {
	case ev.Headers[protocol.HeaderRunner] == RunnerID:
		sig = protocol.SignRequest(w.Daemon, endpoint, RunnerID, at, body)
	case ev.Headers[protocol.HeaderSite] == SiteID:
		sig = protocol.SignSiteRequest(w.Site, endpoint, SiteID, at, body)
	default:
		return nil
	}
	ev.Headers[protocol.HeaderIssuedAt] = strconv.FormatInt(sig.IssuedAt, 10)
	ev.Headers[protocol.HeaderSignature] = sig.Signature
	return nil
}

func (w *World) fill(body []byte, now time.Time, extra []string) ([]byte, error) {
	s := string(body)
	if !strings.Contains(s, "{{") {
		return body, nil
	}
	deadline := Deadline(now)
	device, err := json.Marshal(w.Daemon.Public())
	if err != nil {
		return nil, err
	}
	repl := []string{
		PlaceholderSiteKeyID, w.Site.KeyID(),
		PlaceholderDevice, string(device),
		PlaceholderDeadlineAt, strconv.FormatInt(deadline, 10),
	}
	repl = append(repl, extra...)
	if strings.Contains(s, PlaceholderPayloadEnvelope) {
		env, err := w.seal(w.Site, w.Daemon, protocol.DirectionPayload, "demo payload: say hello", deadline)
		if err != nil {
			return nil, err
		}
		repl = append(repl, PlaceholderPayloadEnvelope, env)
	}
	if strings.Contains(s, PlaceholderResultEnvelope) {
		env, err := w.seal(w.Daemon, w.Site, protocol.DirectionResult, demoOutcome, deadline)
		if err != nil {
			return nil, err
		}
		repl = append(repl, PlaceholderResultEnvelope, env)
	}
	s = strings.NewReplacer(repl...).Replace(s)
	if i := strings.Index(s, "{{"); i >= 0 && strings.Contains(s[i:], "}}") {
		return nil, fmt.Errorf("demo: event body holds an unknown placeholder near %q", s[i:min(len(s), i+24)])
	}
	return []byte(s), nil
}

// demoOutcome is the result leg's plaintext, a sealed outcome as a daemon
// writes it ({outcome, ran}): the relay never opens it, the site stack
// opens and checks it before it completes the job.
var demoOutcome = func() string {
	text := "demo result: hello"
	s, err := protocol.SealedOutcome{
		Outcome: protocol.OKOutcome(text),
		Ran:     protocol.RunMetadata{Model: DemoCapability.Model, BackendClass: DemoCapability.BackendClass, DurationMs: 420},
	}.Plaintext()
	if err != nil {
		panic(err)
	}
	return s
}()

// seal is a real envelope for JobID from one demo party to the other, so
// the daemon of the local stack can open what the sample payload carries.
func (w *World) seal(from, to *protocol.Keys, dir string, plaintext string, deadline int64) (string, error) {
	env, err := protocol.Seal(plaintext, from, to.Public().Encryption, protocol.EnvelopeContext{
		JobID: JobID, SenderKeyID: from.KeyID(), RecipientKeyID: to.KeyID(),
		DeadlineAt: deadline, Direction: dir,
	})
	if err != nil {
		return "", fmt.Errorf("demo: seal: %w", err)
	}
	raw, err := protocol.Encode(env)
	if err != nil {
		return "", err
	}
	return string(raw), nil
}
