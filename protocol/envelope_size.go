package protocol

import (
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// EnvelopeBytes is an envelope's size the way the reference measures it:
// the length of JSON.stringify(envelope) in UTF-16
// code units, counted rather than built. It is the cap and the meter at once,
// so it must be this number and not the request body's or the ciphertext's
// length, or a job could be accepted at one size and counted at another.
func EnvelopeBytes(env SealedEnvelope) int64 {
	n := int64(2) // {}
	n += memberLength("ciphertext", jsonStringLength(env.Ciphertext))
	n += 1 + memberLength("recipientKeyId", jsonStringLength(env.RecipientKeyID))
	n += 1 + memberLength("senderKeyId", jsonStringLength(env.SenderKeyID))
	n += 1 + memberLength("direction", jsonStringLength(env.Direction))
	n += 1 + memberLength("deadlineAt", int64(len(strconv.FormatInt(env.DeadlineAt, 10))))
	return n
}

func memberLength(key string, valueLength int64) int64 {
	return jsonStringLength(key) + 1 + valueLength
}

// jsonStringLength is the length of JSON.stringify(s) in UTF-16 code
// units: quotes, two units for the short escapes, six
// for other control characters, two for a code point above U+FFFF. A Go
// string holds no lone surrogates (decoding turns them into U+FFFD, one
// unit), and invalid UTF-8 counts as the U+FFFD a JS reader would see.
func jsonStringLength(s string) int64 {
	n := int64(2)
	for i := 0; i < len(s); {
		plain := plainPrefix(s[i:])
		n += int64(plain)
		i += plain
		if i >= len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			// The common case, byte by byte with no rune decoding: a
			// ciphertext is all printable ASCII.
			switch {
			case c == '"' || c == '\\':
				n += 2
			case c == '\b' || c == '\t' || c == '\n' || c == '\f' || c == '\r':
				n += 2
			case c < 0x20:
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r > 0xffff {
			n += 2
		} else {
			n++
		}
		i += size
	}
	return n
}

// EnvelopeTooLargeError is the refusal of an envelope over MaxEnvelopeBytes.
// The reference answers it as 400 bad-request (not 413, not a code of its
// own: a code added today reaches last month's clients as an unknown value)
// with RelayMessage as the message.
type EnvelopeTooLargeError struct {
	Bytes int64
	Limit int64
}

func (e *EnvelopeTooLargeError) Error() string {
	return "protocol: envelope too large: " + TooLargeMessage(e.Bytes, e.Limit)
}

// RelayMessage is the reference relay's exact refusal message: the protocol's
// sentence and the relay's "same ceiling" clause.
func (e *EnvelopeTooLargeError) RelayMessage() string {
	return TooLargeMessage(e.Bytes, e.Limit) + " Every plan has the same ceiling."
}

// CheckEnvelopeSize refuses an envelope whose EnvelopeBytes exceeds
// MaxEnvelopeBytes with an *EnvelopeTooLargeError. The relay calls it on
// both legs, payload and result: a rail that guarded only one direction
// would be a relay the other side could still fill. Nothing about the size is
// kept: the number exists for this check and the message only.
func CheckEnvelopeSize(env SealedEnvelope) error {
	if n := EnvelopeBytes(env); n > MaxEnvelopeBytes {
		return &EnvelopeTooLargeError{Bytes: n, Limit: MaxEnvelopeBytes}
	}
	return nil
}

// TooLargeMessage is the protocol's too-large sentence, byte for byte.
func TooLargeMessage(bytes, limit int64) string {
	return fmt.Sprintf("this message is %s and the limit is %s — it is a limit on one message rather "+
		"than on how many you send. Split the work into smaller jobs and send them separately.",
		describeBytes(bytes), describeBytes(limit))
}

// describeBytes is the size as that sentence states it: megabytes rounded up,
// never to nearest, so a message one byte over the line never reads "10.5 MB
// and the limit is 10.5 MB". Computed in float64 like the reference; the value
// is k/10 for an integer k, so one-decimal formatting never meets a tie.
func describeBytes(bytes int64) string {
	mb := math.Ceil(float64(bytes)/(1024*1024)*10) / 10
	return strconv.FormatFloat(mb, 'f', 1, 64) + " MB"
}
