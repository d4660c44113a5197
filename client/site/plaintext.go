package site

import "github.com/byorelay/byorelay/protocol"

// The two sealed plaintexts, the payload and the outcome, are protocol's
// (protocol/plaintext.go), which a device uses too. The names below once
// were this package's; each is protocol's own value, so code written
// against them keeps compiling and nothing here can drift from what a
// device seals and opens. New code names protocol's.

// Job kinds.
const (
	// KindGenerate is protocol.KindGenerate.
	//
	// Deprecated: use protocol.KindGenerate.
	KindGenerate = protocol.KindGenerate
	// KindChat is protocol.KindChat.
	//
	// Deprecated: use protocol.KindChat.
	KindChat = protocol.KindChat
)

// Payload limits, the protocol's, in characters as zod counts them.
const (
	// MaxTextChars is protocol.MaxTextChars.
	//
	// Deprecated: use protocol.MaxTextChars.
	MaxTextChars = protocol.MaxTextChars
	// MaxMessages is protocol.MaxMessages.
	//
	// Deprecated: use protocol.MaxMessages.
	MaxMessages = protocol.MaxMessages
	// MaxTotalChars is protocol.MaxTotalChars.
	//
	// Deprecated: use protocol.MaxTotalChars.
	MaxTotalChars = protocol.MaxTotalChars
)

// Payload is protocol.JobPayload.
//
// Deprecated: use protocol.JobPayload.
type Payload = protocol.JobPayload

// ChatMessage is protocol.ChatMessage.
//
// Deprecated: use protocol.ChatMessage.
type ChatMessage = protocol.ChatMessage

// GeneratePayload builds an llm.generate payload.
//
// Deprecated: use protocol.GeneratePayload.
func GeneratePayload(prompt string) Payload { return protocol.GeneratePayload(prompt) }

// ChatPayload builds an llm.chat payload.
//
// Deprecated: use protocol.ChatPayload.
func ChatPayload(messages ...ChatMessage) Payload { return protocol.ChatPayload(messages...) }

// SizeClassOf buckets a text length into the protocol's size classes.
//
// Deprecated: use protocol.SizeClassOf.
func SizeClassOf(textChars int) string { return protocol.SizeClassOf(textChars) }

// DecodePayload parses an opened payload plaintext strictly, for kind.
//
// Deprecated: use protocol.DecodeJobPayload.
func DecodePayload(plaintext, kind string) (Payload, error) {
	return protocol.DecodeJobPayload(plaintext, kind)
}

// Outcome dispositions (ResultDisposition), also JobOutcome.outcome.
const (
	// OutcomeOK is protocol.DispositionOK.
	//
	// Deprecated: use protocol.DispositionOK.
	OutcomeOK = protocol.DispositionOK
	// OutcomeError is protocol.DispositionError.
	//
	// Deprecated: use protocol.DispositionError.
	OutcomeError = protocol.DispositionError
	// OutcomeCanceled is protocol.DispositionCanceled.
	//
	// Deprecated: use protocol.DispositionCanceled.
	OutcomeCanceled = protocol.DispositionCanceled
)

// Outcome is a JobOutcome; protocol.Outcome is its definition. It is an
// alias, not a new type, so that a site's job store, which records it,
// and this package, which seals and opens it, hold one type.
//
// Deprecated: use protocol.Outcome.
type Outcome = protocol.Outcome

// OK is a successful outcome.
//
// Deprecated: use protocol.OKOutcome.
func OK(text string) Outcome { return protocol.OKOutcome(text) }

// Failed is an error outcome.
//
// Deprecated: use protocol.FailedOutcome.
func Failed(code, message string, retryable bool) Outcome {
	return protocol.FailedOutcome(code, message, retryable)
}

// Canceled is the outcome a device reports after honouring a cancel.
//
// Deprecated: use protocol.CanceledOutcome.
func Canceled() Outcome { return protocol.CanceledOutcome() }

// RunMetadata is protocol.RunMetadata: the device's signed account of how
// it ran the job.
//
// Deprecated: use protocol.RunMetadata.
type RunMetadata = protocol.RunMetadata

// SealedOutcome is protocol.SealedOutcome, the result leg's plaintext.
//
// Deprecated: use protocol.SealedOutcome.
type SealedOutcome = protocol.SealedOutcome

// DecodeSealedOutcome opens a result the way @byollm/server does.
//
// Deprecated: use protocol.DecodeSealedOutcome.
func DecodeSealedOutcome(plaintext, disposition string) (SealedOutcome, error) {
	return protocol.DecodeSealedOutcome(plaintext, disposition)
}
