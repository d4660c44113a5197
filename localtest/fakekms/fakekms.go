// Package fakekms is a stand-in for the part of AWS KMS a grant signer
// calls: GetPublicKey and Sign with Ed25519 keys (key spec
// ECC_NIST_EDWARDS25519, algorithm ED25519_SHA_512 over a RAW message),
// spoken over the service's JSON protocol (X-Amz-Target TrentService.*),
// so the SDK's own kms client talks to it unchanged.
//
// It is a stand-in, not an emulator, because nothing better runs here:
// moto (which the other tests use for SSM and friends) serves no Ed25519
// keys in its KMS. It answers what KMS documents for these two operations,
// and refuses what KMS refuses that a signer could get wrong (an unknown
// key, a digest or another algorithm, a message over 4,096 bytes, a
// request with no SigV4 signature). Everything else is out of its scope.
package fakekms

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Region and Account name the keys' ARNs; any region a client is built
// for is answered.
const (
	Region  = "us-east-1"
	Account = "000000000000"
)

// MaxRawMessage is the largest RAW message KMS signs.
const MaxRawMessage = 4096

// Options tune the stand-in.
type Options struct {
	// Latency is added to every answer: the round trip to the regional
	// endpoint and the HSM's work, which a local server has none of.
	Latency time.Duration
}

// Server is a running stand-in.
type Server struct {
	URL string

	opts  Options
	mu    sync.Mutex
	keys  map[string]*key // by key id
	calls atomic.Int64
	signs atomic.Int64
}

type key struct {
	id      string
	spec    string
	private ed25519.PrivateKey // nil for a key that is not Ed25519
	spki    []byte             // the public key, DER SubjectPublicKeyInfo
}

// Start serves a stand-in on loopback until the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s := &Server{opts: opts, keys: map[string]*key{}}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	s.URL = ts.URL
	return s
}

// AddKey holds an Ed25519 signing key made from seed (a fresh one when nil)
// and returns its key id.
func (s *Server) AddKey(t testing.TB, seed []byte) string {
	t.Helper()
	if seed == nil {
		seed = make([]byte, ed25519.SeedSize)
		if _, err := rand.Read(seed); err != nil {
			t.Fatal(err)
		}
	}
	private := ed25519.NewKeyFromSeed(seed)
	spki, err := x509.MarshalPKIXPublicKey(private.Public())
	if err != nil {
		t.Fatal(err)
	}
	return s.add(t, &key{spec: "ECC_NIST_EDWARDS25519", private: private, spki: spki})
}

// AddP256Key holds an ECC_NIST_P256 signing key, which a grant signer must
// refuse: devices verify Ed25519 only.
func (s *Server) AddP256Key(t testing.TB) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	spki, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return s.add(t, &key{spec: "ECC_NIST_P256", spki: spki})
}

func (s *Server) add(t testing.TB, k *key) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	k.id = fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[k.id] = k
	return k.id
}

// ARN is the key ARN of id, as KMS returns it.
func ARN(id string) string { return "arn:aws:kms:" + Region + ":" + Account + ":key/" + id }

// Calls is how many requests the stand-in was sent.
func (s *Server) Calls() int64 { return s.calls.Load() }

// Signs is how many Sign calls were answered with a signature.
func (s *Server) Signs() int64 { return s.signs.Load() }

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.calls.Add(1)
	if s.opts.Latency > 0 {
		time.Sleep(s.opts.Latency)
	}
	if r.Method != http.MethodPost || !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") {
		fail(w, http.StatusBadRequest, "MissingAuthenticationTokenException", "a SigV4-signed POST is required")
		return
	}
	var in struct {
		KeyID            string `json:"KeyId"`
		Message          []byte `json:"Message"` // base64 on the wire, as encoding/json reads []byte
		MessageType      string `json:"MessageType"`
		SigningAlgorithm string `json:"SigningAlgorithm"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		fail(w, http.StatusBadRequest, "SerializationException", err.Error())
		return
	}
	k := s.lookup(in.KeyID)
	if k == nil {
		fail(w, http.StatusBadRequest, "NotFoundException", "Key '"+in.KeyID+"' does not exist")
		return
	}
	switch op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "TrentService."); op {
	case "GetPublicKey":
		out := map[string]any{
			"KeyId": ARN(k.id), "KeySpec": k.spec, "CustomerMasterKeySpec": k.spec,
			"KeyUsage": "SIGN_VERIFY", "PublicKey": k.spki,
		}
		if k.private != nil {
			out["SigningAlgorithms"] = []string{"ED25519_SHA_512", "ED25519_PH_SHA_512"}
		} else {
			out["SigningAlgorithms"] = []string{"ECDSA_SHA_256"}
		}
		answer(w, out)
	case "Sign":
		switch {
		case k.private == nil:
			fail(w, http.StatusBadRequest, "UnsupportedOperationException", "this stand-in signs with Ed25519 keys only")
		case in.SigningAlgorithm != "ED25519_SHA_512":
			fail(w, http.StatusBadRequest, "InvalidKeyUsageException", "this stand-in signs with ED25519_SHA_512 only, not "+in.SigningAlgorithm)
		case in.MessageType != "RAW":
			fail(w, http.StatusBadRequest, "ValidationException", "ED25519_SHA_512 requires MessageType RAW")
		case len(in.Message) == 0 || len(in.Message) > MaxRawMessage:
			fail(w, http.StatusBadRequest, "ValidationException", fmt.Sprintf("a RAW message is 1 to %d bytes, not %d", MaxRawMessage, len(in.Message)))
		default:
			s.signs.Add(1)
			answer(w, map[string]any{"KeyId": ARN(k.id), "SigningAlgorithm": in.SigningAlgorithm,
				"Signature": ed25519.Sign(k.private, in.Message)})
		}
	default:
		fail(w, http.StatusBadRequest, "UnknownOperationException", "this stand-in serves GetPublicKey and Sign, not "+op)
	}
}

// lookup finds a key by id or key ARN.
func (s *Server) lookup(id string) *key {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, ok := s.keys[id]; ok {
		return k
	}
	if rest, ok := strings.CutPrefix(id, "arn:aws:kms:"+Region+":"+Account+":key/"); ok {
		return s.keys[rest]
	}
	return nil
}

func answer(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, typ, message string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": typ, "message": message})
}
