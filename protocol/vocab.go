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

// JobKinds (kinds.ts JobKind).
var JobKinds = []string{KindGenerate, KindChat}

// SizeClasses (job.ts SizeClass).
var SizeClasses = []string{"small", "medium", "large", "unbounded"}

// Audiences (audience.ts Audience): who a job is for.
var Audiences = []string{AudiencePrivate, AudienceTeam}

// OfferScopes (audience.ts OfferScope): who a capability is offered to.
// The same two words as Audiences, a separate enum in the reference.
var OfferScopes = []string{AudiencePrivate, AudienceTeam}

// BackendClasses (backends.ts BackendClass).
var BackendClasses = []string{"http", "process"}

// BackendIDs (backends.ts BACKENDS keys, in declaration order). Adding one
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

// BackendClassOf is each backend's class (BACKENDS[id].class).
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

// ReleaseReasons (wire.ts ReleaseRequest.reason).
var ReleaseReasons = []string{ReasonShutdown, ReasonPause, ReasonRevoked, ReasonBackendDown, ReasonRefused}

// ResultDispositions (wire.ts ResultDisposition).
var ResultDispositions = []string{DispositionOK, DispositionError, DispositionCanceled}

// EnvelopeDirections (envelope.ts EnvelopeDirection).
var EnvelopeDirections = []string{DirectionPayload, DirectionResult}

// Platforms a daemon may report at pairing.
var Platforms = []string{"darwin", "linux", "win32"}

// Job states (job.ts JobState).
var JobStates = []string{"queued", "claimed", "running", "ok", "error", "canceled", "expired"}

// RoutedStates is where a routed job is in the reference relay
// (relay/state.ts RoutedState); the site plane's and result's `state`.
var RoutedStates = []string{"queued", "awaiting-payload", "ready", "running", "done"}

// Envelope direction values.
const (
	DirectionPayload = "payload"
	DirectionResult  = "result"
)

// Protocol constants that are not crypto-specific.
const (
	// MaxEnvelopeBytes bounds one sealed envelope's JSON (job.ts).
	MaxEnvelopeBytes = 6 * 1024 * 1024
	// MaxClockSkewMs is the signature freshness window (signing.ts); the
	// clock-skew refusal reports it.
	MaxClockSkewMs = 120_000
	// MaxSuccessionChain bounds HeartbeatResponse successions (succession.ts).
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
