package site

import "github.com/byorelay/byorelay/protocol"

// The two sealed plaintexts, the payload and the outcome, are protocol's
// (protocol/plaintext.go), which a device uses too. The names below are
// this package's for code written against it; each is protocol's own
// value, so nothing here can drift from what a device seals and opens.

// Job kinds.
const (
	KindGenerate = protocol.KindGenerate
	KindChat     = protocol.KindChat
)

// Payload limits, the protocol's, in characters as zod counts them.
const (
	MaxTextChars  = protocol.MaxTextChars
	MaxMessages   = protocol.MaxMessages
	MaxTotalChars = protocol.MaxTotalChars
)

// Payload is protocol.JobPayload.
type Payload = protocol.JobPayload

// ChatMessage is protocol.ChatMessage.
type ChatMessage = protocol.ChatMessage

// GeneratePayload builds an llm.generate payload.
func GeneratePayload(prompt string) Payload { return protocol.GeneratePayload(prompt) }

// ChatPayload builds an llm.chat payload.
func ChatPayload(messages ...ChatMessage) Payload { return protocol.ChatPayload(messages...) }

// SizeClassOf buckets a text length into the protocol's size classes.
func SizeClassOf(textChars int) string { return protocol.SizeClassOf(textChars) }

// DecodePayload parses an opened payload plaintext strictly, for kind.
func DecodePayload(plaintext, kind string) (Payload, error) {
	return protocol.DecodeJobPayload(plaintext, kind)
}

// Outcome dispositions (ResultDisposition), also JobOutcome.outcome.
const (
	OutcomeOK       = protocol.DispositionOK
	OutcomeError    = protocol.DispositionError
	OutcomeCanceled = protocol.DispositionCanceled
)

// Outcome is a JobOutcome; protocol.Outcome is its definition. It is an
// alias, not a new type, so that a site's job store, which records it,
// and this package, which seals and opens it, hold one type, and code that
// names site.Outcome keeps compiling.
type Outcome = protocol.Outcome

// OK is a successful outcome.
func OK(text string) Outcome { return protocol.OKOutcome(text) }

// Failed is an error outcome.
func Failed(code, message string, retryable bool) Outcome {
	return protocol.FailedOutcome(code, message, retryable)
}

// Canceled is the outcome a device reports after honouring a cancel.
func Canceled() Outcome { return protocol.CanceledOutcome() }

// RunMetadata is protocol.RunMetadata: the device's signed account of how
// it ran the job.
type RunMetadata = protocol.RunMetadata

// SealedOutcome is protocol.SealedOutcome, the result leg's plaintext.
type SealedOutcome = protocol.SealedOutcome

// DecodeSealedOutcome opens a result the way @byollm/server does
// (protocol.DecodeSealedOutcome).
func DecodeSealedOutcome(plaintext, disposition string) (SealedOutcome, error) {
	return protocol.DecodeSealedOutcome(plaintext, disposition)
}
