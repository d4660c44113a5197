package protocol

// Closed vocabularies. Each is a zod enum in @byollm/protocol 0.1.1 and an
// enum value is the contract: a value outside one is refused, never passed
// through, because a relay that forwards an unknown kind hands a daemon
// something it will fail schema validation on, with nothing named.

// Values of the vocabularies below that code names directly.
const (
	KindGenerate = "llm.generate"
	KindChat     = "llm.chat"

	AudiencePrivate = "private"
	AudienceTeam    = "team"

	DispositionOK       = "ok"
	DispositionError    = "error"
	DispositionCanceled = "canceled"

	ReasonShutdown    = "shutdown"
	ReasonPause       = "pause"
	ReasonRevoked     = "revoked"
	ReasonBackendDown = "backend-down"
	// ReasonRefused is load-bearing: the relay must stop offering that job
	// to that runner, or the pair spins between claim and release.
	ReasonRefused = "refused"
)

// JobKinds are the kinds of work a job may be.
var JobKinds = []string{KindGenerate, KindChat}

// SizeClasses are the size buckets a stub's prompt falls in.
var SizeClasses = []string{"small", "medium", "large", "unbounded"}

// Audiences are who a job is for.
var Audiences = []string{AudiencePrivate, AudienceTeam}

// OfferScopes are who a capability is offered to.
// The same two words as Audiences, a separate enum in the reference.
var OfferScopes = []string{AudiencePrivate, AudienceTeam}

// BackendClasses are how a daemon reaches a backend.
var BackendClasses = []string{"http", "process"}

// BackendIDs are the backends a daemon may advertise, in the protocol's
// declaration order. Adding one
// is a protocol change: a daemon advertising an id the relay does not know
// fails schema validation on every heartbeat.
var BackendIDs = []string{
	"ollama",
	"mlx",
	"llamacpp",
	"vllm",
	"lmstudio",
	"jan",
	"localai",
	"anthropic",
	"openai",
	"gemini",
	"grok",
	"groq",
	"openrouter",
	"together",
	"deepseek",
	"mistral",
	"openai-http",
	"claude-cli",
	"codex-cli",
}

// BackendClassOf is each backend's class.
var BackendClassOf = map[string]string{
	"ollama":      "http",
	"mlx":         "http",
	"llamacpp":    "http",
	"vllm":        "http",
	"lmstudio":    "http",
	"jan":         "http",
	"localai":     "http",
	"anthropic":   "http",
	"openai":      "http",
	"gemini":      "http",
	"grok":        "http",
	"groq":        "http",
	"openrouter":  "http",
	"together":    "http",
	"deepseek":    "http",
	"mistral":     "http",
	"openai-http": "http",
	"claude-cli":  "process",
	"codex-cli":   "process",
}

// ReleaseReasons are why a daemon hands a claimed job back.
var ReleaseReasons = []string{ReasonShutdown, ReasonPause, ReasonRevoked, ReasonBackendDown, ReasonRefused}

// ResultDispositions are how a daemon says a job ended.
var ResultDispositions = []string{DispositionOK, DispositionError, DispositionCanceled}

// EnvelopeDirections are which leg an envelope travels.
var EnvelopeDirections = []string{DirectionPayload, DirectionResult}

// Platforms a daemon may report at pairing.
var Platforms = []string{"darwin", "linux", "win32"}

// JobStates are the states of a job as the protocol names them.
var JobStates = []string{"queued", "claimed", "running", "ok", "error", "canceled", "expired"}

// RoutedStates is where a routed job is in the reference relay: the site
// plane's and result's `state`.
var RoutedStates = []string{"queued", "awaiting-payload", "ready", "running", "done"}

// Envelope direction values.
const (
	DirectionPayload = "payload"
	DirectionResult  = "result"
)

// Protocol constants that are not crypto-specific.
const (
	// MaxEnvelopeBytes bounds one sealed envelope's JSON.
	MaxEnvelopeBytes = 6 * 1024 * 1024
	// MaxClockSkewMs is the signature freshness window; the
	// clock-skew refusal reports it.
	MaxClockSkewMs = 120_000
	// MaxSuccessionChain bounds HeartbeatResponse successions.
	MaxSuccessionChain = 64
	// MaxClaim bounds ClaimRequest.max.
	MaxClaim = 64
	// MaxLabelLength bounds the daemon label shown in runner lists.
	MaxLabelLength = 120
)

func inVocab(vocab []string, v string) bool {
	for _, x := range vocab {
		if x == v {
			return true
		}
	}
	return false
}
