package protocol

import (
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// The two sealed plaintexts, the payload and the outcome. The relay never
// sees them; a device and a site parse them as strictly as the reference's
// zod schemas, because a key the other side does not know makes the whole
// envelope worthless to it: a result with a key a site does not know is
// dropped by that site, in silence. Both clients (client/site,
// client/daemon) use these same types, so the two legs cannot drift and
// neither client imports the other.

// Payload limits, the protocol's, in characters as zod counts them.
const (
	MaxTextChars  = 1_000_000
	MaxMessages   = 256
	MaxTotalChars = 4_000_000
)

// JobPayload is the payload leg's plaintext: a GeneratePayload (Prompt
// set) for llm.generate or a ChatPayload (Messages set) for llm.chat. The
// plaintext is exactly this object, not {kind, payload}.
type JobPayload struct {
	Prompt   string        `json:"prompt,omitempty"`
	Messages []ChatMessage `json:"messages,omitzero"`
	// System is optional and may be present and empty, hence a pointer.
	System *string `json:"system,omitempty"`
}

// ChatMessage is one turn of a ChatPayload.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// GeneratePayload builds an llm.generate payload.
func GeneratePayload(prompt string) JobPayload { return JobPayload{Prompt: prompt} }

// ChatPayload builds an llm.chat payload.
func ChatPayload(messages ...ChatMessage) JobPayload { return JobPayload{Messages: messages} }

// Validate checks the value rules shared by both shapes; CheckKind checks
// the shape against a job kind.
func (p JobPayload) Validate() error {
	if p.Prompt != "" && p.Messages != nil {
		return fmt.Errorf("payload: has both prompt and messages")
	}
	if p.Prompt == "" && p.Messages == nil {
		return fmt.Errorf("payload: has neither prompt nor messages")
	}
	if p.System != nil && chars(*p.System) > MaxTextChars {
		return fmt.Errorf("payload: system is longer than %d characters", MaxTextChars)
	}
	if p.Prompt != "" && chars(p.Prompt) > MaxTextChars {
		return fmt.Errorf("payload: prompt is longer than %d characters", MaxTextChars)
	}
	if p.Messages != nil {
		if len(p.Messages) == 0 || len(p.Messages) > MaxMessages {
			return fmt.Errorf("payload: needs 1 to %d messages, has %d", MaxMessages, len(p.Messages))
		}
		total := 0
		for i, m := range p.Messages {
			switch m.Role {
			case "system", "user", "assistant":
			default:
				return fmt.Errorf("payload: messages[%d].role %q is not system, user or assistant", i, m.Role)
			}
			n := chars(m.Content)
			if n > MaxTextChars {
				return fmt.Errorf("payload: messages[%d].content is longer than %d characters", i, MaxTextChars)
			}
			total += n
		}
		if p.System != nil {
			total += chars(*p.System)
		}
		if total > MaxTotalChars {
			return fmt.Errorf("payload: %d characters in all, more than %d", total, MaxTotalChars)
		}
	}
	return nil
}

// CheckKind refuses a payload whose shape is not the kind's: a device
// composes the prompt by kind, so a chat payload under llm.generate would
// run as something nobody asked for.
func (p JobPayload) CheckKind(kind string) error {
	switch kind {
	case KindGenerate:
		if p.Prompt == "" {
			return fmt.Errorf("payload: llm.generate needs a prompt")
		}
	case KindChat:
		if p.Messages == nil {
			return fmt.Errorf("payload: llm.chat needs messages")
		}
	default:
		return fmt.Errorf("payload: unknown kind %q", kind)
	}
	return nil
}

// TextLength is the payload's text length as the protocol measures it: the
// text a model reads, in
// UTF-16 code units as JS .length counts them. The site derives the stub's
// sizeClass from it, and a device re-measures the opened payload with it.
func (p JobPayload) TextLength() int {
	n := 0
	if p.System != nil {
		n += utf16Len(*p.System)
	}
	if p.Messages != nil {
		for _, m := range p.Messages {
			n += utf16Len(m.Content)
		}
		return n
	}
	return n + utf16Len(p.Prompt)
}

// SizeClassOf buckets a text length into the protocol's size classes.
func SizeClassOf(textChars int) string {
	switch {
	case textChars <= 4000:
		return "small"
	case textChars <= 64000:
		return "medium"
	default:
		return "large"
	}
}

// DecodeJobPayload parses an opened payload plaintext strictly, for kind.
func DecodeJobPayload(plaintext, kind string) (JobPayload, error) {
	var p JobPayload
	if err := DecodeStrict([]byte(plaintext), &p); err != nil {
		return JobPayload{}, fmt.Errorf("payload: %w", err)
	}
	if err := p.CheckKind(kind); err != nil {
		return JobPayload{}, err
	}
	return p, nil
}

// RunMetadata is the device's signed account of how it ran the job.
type RunMetadata struct {
	Model        string `json:"model"`
	BackendClass string `json:"backendClass"`
	DurationMs   int64  `json:"durationMs"`
	Stop         string `json:"stop,omitempty"`
	StopReported *bool  `json:"stopReported,omitempty"`
}

// Validate checks RunMetadata's value rules.
func (r RunMetadata) Validate() error {
	if r.Model == "" {
		return fmt.Errorf("ran: model must not be empty")
	}
	if r.BackendClass != "http" && r.BackendClass != "process" {
		return fmt.Errorf("ran: backendClass %q is not http or process", r.BackendClass)
	}
	if r.DurationMs < 0 {
		return fmt.Errorf("ran: durationMs is negative")
	}
	switch r.Stop {
	case "", "end", "length", "stop-sequence", "unknown":
	default:
		return fmt.Errorf("ran: stop %q is not a stop reason", r.Stop)
	}
	return nil
}

// SealedOutcome is the plaintext of the result leg: {outcome, ran}.
type SealedOutcome struct {
	Outcome Outcome     `json:"outcome"`
	Ran     RunMetadata `json:"ran"`
}

// Validate checks both halves.
func (s SealedOutcome) Validate() error {
	if err := s.Outcome.Validate(); err != nil {
		return err
	}
	return s.Ran.Validate()
}

// Plaintext is the JSON sealed on the result leg, written as the
// reference's JSON.stringify would. It refuses a value the site would
// refuse, so a device fails loudly here rather than having its answer
// dropped at the site.
func (s SealedOutcome) Plaintext() (string, error) {
	if err := s.Validate(); err != nil {
		return "", err
	}
	b, err := MarshalJS(s)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// Plaintext is the JSON sealed on the payload leg.
func (p JobPayload) Plaintext() (string, error) {
	if err := p.Validate(); err != nil {
		return "", err
	}
	b, err := MarshalJS(p)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// DecodeSealedOutcome opens a result the way @byollm/server does: a
// strict parse, then the clear-text disposition must equal the sealed
// outcome. The disposition is the relay's routing hint and the one thing on
// the result leg it could have changed; only the site can check it.
func DecodeSealedOutcome(plaintext, disposition string) (SealedOutcome, error) {
	var s SealedOutcome
	if err := DecodeStrict([]byte(plaintext), &s); err != nil {
		return SealedOutcome{}, fmt.Errorf("sealed outcome: %w", err)
	}
	if s.Outcome.Outcome != disposition {
		return SealedOutcome{}, fmt.Errorf("sealed outcome: disposition %s, but %s was sealed",
			strconv.Quote(disposition), strconv.Quote(s.Outcome.Outcome))
	}
	return s, nil
}

// chars is a string's length as zod 4 measures min/max: code points.
func chars(s string) int { return utf8.RuneCountInString(s) }

// utf16Len is JS .length.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}
