package protocol

import "fmt"

// Outcome is the protocol's JobOutcome, how a job ended, discriminated
// on Outcome (one of ResultDispositions):
//
//	ok:       Text (required, may be empty), ArtifactURL optional
//	error:    Code, Message, Retryable (all required)
//	canceled: nothing else
//
// It is sealed inside the result leg between a device and a site, and a
// site's job store records it, so it lives here beside the other wire
// types: a store contract that names it imports no SDK.
type Outcome struct {
	Outcome     string  `json:"outcome"`
	Text        *string `json:"text,omitempty"`
	ArtifactURL string  `json:"artifactUrl,omitempty"`
	Code        string  `json:"code,omitempty"`
	Message     string  `json:"message,omitempty"`
	Retryable   *bool   `json:"retryable,omitempty"`
}

// OKOutcome is a successful outcome.
func OKOutcome(text string) Outcome { return Outcome{Outcome: DispositionOK, Text: &text} }

// FailedOutcome is an error outcome.
func FailedOutcome(code, message string, retryable bool) Outcome {
	return Outcome{Outcome: DispositionError, Code: code, Message: message, Retryable: &retryable}
}

// CanceledOutcome is the outcome a device reports after honouring a cancel.
func CanceledOutcome() Outcome { return Outcome{Outcome: DispositionCanceled} }

// TextOrEmpty is the answer of an ok outcome, "" otherwise.
func (o Outcome) TextOrEmpty() string {
	if o.Text == nil {
		return ""
	}
	return *o.Text
}

// Validate enforces each arm's strict shape: a field from another arm is
// an unknown key to the reference's discriminated union.
func (o Outcome) Validate() error {
	switch o.Outcome {
	case DispositionOK:
		if o.Text == nil {
			return fmt.Errorf("outcome: ok needs text")
		}
		if o.Code != "" || o.Message != "" || o.Retryable != nil {
			return fmt.Errorf("outcome: ok carries error fields")
		}
	case DispositionError:
		if o.Code == "" || o.Message == "" || o.Retryable == nil {
			return fmt.Errorf("outcome: error needs code, message and retryable")
		}
		if o.Text != nil || o.ArtifactURL != "" {
			return fmt.Errorf("outcome: error carries ok fields")
		}
	case DispositionCanceled:
		if o.Text != nil || o.ArtifactURL != "" || o.Code != "" || o.Message != "" || o.Retryable != nil {
			return fmt.Errorf("outcome: canceled carries other fields")
		}
	default:
		return fmt.Errorf("outcome: unknown outcome %q", o.Outcome)
	}
	return nil
}
