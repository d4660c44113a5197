package siteserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// Answers at rest. A device's outcome is as private as the prompt it
// answers, so the store keeps it the way it keeps the payload: sealed by the
// site to its own key (sitestore.Job.Answer), with the disposition alone in
// the clear for the rules that judge by it (dependencies unblock on ok). The
// whole outcome is sealed, not only its text: an error's code and message
// are the daemon's words, and a backend's error often quotes what it was
// sent. Both lanes seal the same way, after the device's envelope has been
// opened and verified: the direct lane in the result endpoint, the cloud
// lane in the ledger's End. Re-sealing, rather than keeping the device's
// envelope, gives one format for both lanes that opens with the site's key
// alone, whether or not the device is still known.
//
// The answer is opened only where the app reads the job (Server.Job and what
// is built on it: the app API's job and result, the admin listener) and for
// the final text of a cloud-lane stream (the ledger's Lookup).

// answerVersion tags an answer's plaintext. A stream checkpoint, the other
// envelope the site seals to itself in the result direction, holds bare
// text, so neither can stand in for the other.
const answerVersion = "byorelay/answer-at-rest/v1"

type answerPlaintext struct {
	V       string           `json:"v"`
	Outcome protocol.Outcome `json:"outcome"`
}

// answers seals and opens outcomes with the site's keys.
type answers struct {
	keys      *protocol.Keys
	site      protocol.PublicIdentity
	siteKeyID string
}

// seal returns what the store keeps of a device's outcome: its disposition
// in the clear and the whole outcome sealed. now is the store clock; the
// envelope's deadlineAt carries it (an answer at rest has no deadline of its
// own; the retention of the job item bounds it).
func (a answers) seal(jobID string, o protocol.Outcome, now int64) (protocol.Outcome, *protocol.SealedEnvelope, error) {
	plain, err := json.Marshal(answerPlaintext{V: answerVersion, Outcome: o})
	if err != nil {
		return protocol.Outcome{}, nil, err
	}
	env, err := protocol.Seal(string(plain), a.keys, a.site.Encryption, a.context(jobID, now))
	if err != nil {
		return protocol.Outcome{}, nil, err
	}
	return protocol.Outcome{Outcome: o.Outcome}, &env, nil
}

func (a answers) context(jobID string, deadlineAt int64) protocol.EnvelopeContext {
	return protocol.EnvelopeContext{JobID: jobID, SenderKeyID: a.siteKeyID, RecipientKeyID: a.siteKeyID,
		DeadlineAt: deadlineAt, Direction: protocol.DirectionResult}
}

// errAnswerMismatch is an opened answer whose disposition is not the one the
// store judged the job by.
var errAnswerMismatch = errors.New("its disposition is not the job's")

// open returns j with its sealed answer opened into Outcome. A job with no
// sealed answer (a site-made end, or an answer stored before answers were
// sealed) is returned as it is.
func (a answers) open(j sitestore.Job) (sitestore.Job, error) {
	if j.Answer == nil {
		return j, nil
	}
	plain, err := protocol.Open(*j.Answer, a.keys, a.site.Identity, protocol.ExpectedEnvelope{
		JobID: j.ID, SenderKeyID: a.siteKeyID, RecipientKeyID: a.siteKeyID, Direction: protocol.DirectionResult,
	})
	var p answerPlaintext
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader([]byte(plain)))
		dec.DisallowUnknownFields()
		err = dec.Decode(&p)
	}
	if err == nil && p.V != answerVersion {
		err = fmt.Errorf("not an answer (%q)", p.V)
	}
	if err == nil && (j.Outcome == nil || j.Outcome.Outcome != p.Outcome.Outcome) {
		err = errAnswerMismatch
	}
	if err != nil {
		return j, fmt.Errorf("siteserver: job %s's stored answer does not open: %w", j.ID, err)
	}
	j.Outcome = &p.Outcome
	return j, nil
}

// OpenAnswer is j with its sealed answer opened by the site's keys: for a
// tool that reads the site store directly (an export, a test) rather than
// through a Server. A job with no sealed answer is returned as it is.
func OpenAnswer(keys *protocol.Keys, j sitestore.Job) (sitestore.Job, error) {
	return answers{keys: keys, site: keys.Public(), siteKeyID: keys.KeyID()}.open(j)
}
