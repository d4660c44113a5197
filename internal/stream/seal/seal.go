// Package seal carries a live stream's text through a blind relay: the
// daemon seals each coalesced delta under a key only it and the site can
// derive, the relay stores and forwards opaque frames seeing sizes and
// timing only, and the site opens them, checks the frame counter and the
// offsets, and runs the text-level conform pass (package stream).
//
// The key is per job and per lease: X25519 agreement between the device's
// and the site's pinned encryption keys, expanded with HKDF-SHA256 over the
// job id, the lease id and both key ids. Frames are XChaCha20-Poly1305 with
// a random nonce; the counter, the offsets and the frame kind are clear
// metadata (the relay checks contiguity on them) bound into the AAD, so the
// site detects any reorder, drop, duplicate, edit or splice. Why this and
// not one SealedEnvelope per delta is argued in docs/streaming.md.
package seal

import (
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/byorelay/byorelay/internal/stream"
	"github.com/byorelay/byorelay/protocol"
)

// keyLabel separates the stream key from every other use of the same
// X25519 agreement; aadLabel separates frame AADs likewise.
const (
	keyLabel = "byorelay/v1/stream-key"
	aadLabel = "byorelay/v1/stream-frame"
)

// Kinds of sealed frame.
const (
	KindChunk = "chunk"
	KindEnd   = "end"
)

// MaxTextUnits bounds one frame's text (UTF-16 code units), so a frame item
// stays a few KB however a producer coalesces.
const MaxTextUnits = 4096

// Context names the one stream a key is for. Every field goes into the key
// derivation, so a frame sealed for another job, another lease (a re-claim)
// or another pair of keys does not open.
type Context struct {
	JobID       string
	LeaseID     string
	DeviceKeyID string
	SiteKeyID   string
}

// Key is a derived per-job stream key. It never leaves the endpoints.
type Key struct {
	k [chacha20poly1305.KeySize]byte
}

// String redacts, so a key cannot reach a log line by accident.
func (Key) String() string { return "seal.Key{redacted}" }

// DeviceKey is the daemon's side: its keys and the site's pinned identity.
func DeviceKey(device *protocol.Keys, site protocol.PublicIdentity, ctx Context) (Key, error) {
	return derive(device, site.Encryption, ctx)
}

// SiteKey is the site's side: its keys and the claiming device's identity
// as the relay's directory reported it.
func SiteKey(site *protocol.Keys, device protocol.PublicIdentity, ctx Context) (Key, error) {
	return derive(site, device.Encryption, ctx)
}

func derive(own *protocol.Keys, peerEncryption string, ctx Context) (Key, error) {
	if ctx.JobID == "" || ctx.LeaseID == "" || ctx.DeviceKeyID == "" || ctx.SiteKeyID == "" {
		return Key{}, errors.New("seal: incomplete stream context")
	}
	secret, err := own.Agree(peerEncryption)
	if err != nil {
		return Key{}, fmt.Errorf("seal: %w", err)
	}
	// Length-prefixed fields: no two contexts share an info string.
	info := keyLabel
	for _, f := range []string{ctx.JobID, ctx.LeaseID, ctx.DeviceKeyID, ctx.SiteKeyID} {
		info += fmt.Sprintf("|%d:%s", len(f), f)
	}
	raw, err := hkdf.Key(sha256.New, secret, nil, info, chacha20poly1305.KeySize)
	if err != nil {
		return Key{}, fmt.Errorf("seal: derive: %w", err)
	}
	var k Key
	copy(k.k[:], raw)
	return k, nil
}

// Frame is a sealed frame as the relay stores and forwards it: clear
// counters the relay checks, and ciphertext it cannot read.
type Frame struct {
	N    int64  `json:"n"`    // 0, 1, 2, ... with no gap
	From int64  `json:"from"` // UTF-16 offset where this frame's text starts
	Seq  int64  `json:"seq"`  // where it ends; From == Seq on an end
	Kind string `json:"kind"` // KindChunk or KindEnd
	CT   string `json:"ct"`   // base64url(nonce || XChaCha20-Poly1305 ciphertext)
}

// endPlain is the sealed content of an end frame.
type endPlain struct {
	Status stream.Status `json:"status"`
	Error  string        `json:"error,omitempty"`
}

func aad(f Frame) []byte {
	b := []byte(aadLabel)
	b = binary.BigEndian.AppendUint64(b, uint64(f.N))
	b = binary.BigEndian.AppendUint64(b, uint64(f.From))
	b = binary.BigEndian.AppendUint64(b, uint64(f.Seq))
	return append(b, f.Kind...)
}

// Sealer is the producer's side: it numbers frames and keeps the offsets
// contiguous. Not safe for concurrent use.
type Sealer struct {
	key   Key
	n     int64
	pos   int64
	ended bool
}

// NewSealer starts a stream at offset 0, frame 0.
func NewSealer(k Key) *Sealer { return &Sealer{key: k} }

// Pos is the produced length so far.
func (s *Sealer) Pos() int64 { return s.pos }

// Chunk seals text as the next frame. Empty text is refused: a frame that
// carries nothing costs a write for nothing.
func (s *Sealer) Chunk(text string) (Frame, error) {
	units := stream.UTF16Len(text)
	switch {
	case s.ended:
		return Frame{}, errors.New("seal: stream already ended")
	case units == 0:
		return Frame{}, errors.New("seal: empty chunk")
	case units > MaxTextUnits:
		return Frame{}, fmt.Errorf("seal: chunk of %d units exceeds %d", units, MaxTextUnits)
	}
	f, err := s.seal(Frame{N: s.n, From: s.pos, Seq: s.pos + units, Kind: KindChunk}, []byte(text))
	if err != nil {
		return Frame{}, err
	}
	s.n++
	s.pos += units
	return f, nil
}

// End seals the terminal frame. Its offsets are the produced length.
func (s *Sealer) End(status stream.Status, errText string) (Frame, error) {
	if s.ended {
		return Frame{}, errors.New("seal: stream already ended")
	}
	if !status.Final() {
		return Frame{}, fmt.Errorf("seal: %q is not a final status", status)
	}
	plain, err := json.Marshal(endPlain{Status: status, Error: errText})
	if err != nil {
		return Frame{}, err
	}
	f, err := s.seal(Frame{N: s.n, From: s.pos, Seq: s.pos, Kind: KindEnd}, plain)
	if err != nil {
		return Frame{}, err
	}
	s.n++
	s.ended = true
	return f, nil
}

func (s *Sealer) seal(f Frame, plain []byte) (Frame, error) {
	aead, err := chacha20poly1305.NewX(s.key.k[:])
	if err != nil {
		return Frame{}, err
	}
	// Random nonces, not the counter: a daemon that restarts inside one
	// lease restarts its counter, and a counter nonce would then encrypt
	// two texts under one nonce. 24 random bytes never collide.
	nonce := make([]byte, chacha20poly1305.NonceSizeX, chacha20poly1305.NonceSizeX+len(plain)+chacha20poly1305.Overhead)
	if _, err := rand.Read(nonce); err != nil {
		return Frame{}, fmt.Errorf("seal: nonce: %w", err)
	}
	f.CT = protocol.B64(aead.Seal(nonce, nonce, plain, aad(f)))
	return f, nil
}
