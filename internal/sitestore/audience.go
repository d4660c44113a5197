package sitestore

import "github.com/byorelay/byorelay/protocol"

// Backend cost classes, each backend's cost as @byollm/protocol declares it.
const (
	CostFree         = "free"
	CostMetered      = "metered"
	CostSubscription = "subscription"
)

// backendCost is the BACKENDS cost table. A backend absent here (openai-http,
// whose cost depends on a base URL the server cannot see, or an id this
// build does not know) is treated as metered: the expensive side, and the
// daemon refuses anyway if it disagrees.
var backendCost = map[string]string{
	"ollama": CostFree, "mlx": CostFree, "llamacpp": CostFree, "vllm": CostFree,
	"lmstudio": CostFree, "jan": CostFree, "localai": CostFree,
	"anthropic": CostMetered, "openai": CostMetered, "gemini": CostMetered,
	"grok": CostMetered, "groq": CostMetered, "openrouter": CostMetered,
	"together": CostMetered, "deepseek": CostMetered, "mistral": CostMetered,
	"claude-cli": CostSubscription, "codex-cli": CostSubscription,
}

// BackendCost is a backend's cost class, metered when unknown.
func BackendCost(backendID string) string {
	if c, ok := backendCost[backendID]; ok {
		return c
	}
	return CostMetered
}

// Refusals of the audience decision, the ones a
// server can reach.
const (
	RefuseOtherOwnerPrivate = "audience-self-other-owner"
	RefuseNotInAllowlist    = "not-in-server-allowlist"
	RefuseScopeTooNarrow    = "offer-scope-too-narrow"
	RefuseSubscriptionLock  = "subscription-self-lock"
)

// ServerAdmits is matchAudience as a server evaluates it: for the job's
// owner, audience and roster, and a runner owner offering capability c. It
// returns "" to admit, else the refusal. The server assumes spend consent
// for a metered backend (the daemon's advertised scope already reflects
// it) and admits every owner on the device's local allowlist (it cannot see
// it; the device decides and releases with reason refused).
//
// In order: a private job is its owner's; a roster excludes those not on
// it; the owner's own device is always admitted, whatever the scope or
// backend; a subscription backend runs its owner's work only; an effective
// scope of private refuses; team admits.
func ServerAdmits(jobOwner, audience string, allow []string, runnerOwner string, c protocol.Capability) string {
	same := jobOwner == runnerOwner
	if audience == protocol.AudiencePrivate && !same {
		return RefuseOtherOwnerPrivate
	}
	if audience == protocol.AudienceTeam && !same && allow != nil && !contains(allow, runnerOwner) {
		return RefuseNotInAllowlist
	}
	if same {
		return ""
	}
	cost := BackendCost(c.BackendID)
	if cost == CostSubscription {
		return RefuseSubscriptionLock
	}
	// effectiveOfferScope: subscription narrows to private (handled above);
	// metered with consent (assumed) keeps the configured scope.
	if c.OfferScope != protocol.AudienceTeam {
		return RefuseScopeTooNarrow
	}
	return ""
}

// OwnersDoing reports whether a refusal came from the device owner's side
// (their scope or backend) rather than the job's audience: availability
// says default-unusable for those, audience-admits-nobody for the rest.
func OwnersDoing(refusal string) bool {
	return refusal == RefuseScopeTooNarrow || refusal == RefuseSubscriptionLock
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
