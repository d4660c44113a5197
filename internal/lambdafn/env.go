package lambdafn

import (
	"fmt"
	"os"
	"strconv"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/store/dynamo"
)

// Env is a function's configuration, read from its environment variables
// (set by template.yaml when deployed, by `byorelay invoke` and the local
// stack when not). Endpoint overrides need no field: the AWS SDK reads
// AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL_SNS and
// AWS_ENDPOINT_URL_SCHEDULER itself.
type Env struct {
	// TableName is the routing table (TABLE_NAME), required.
	TableName string
	// BucketName holds envelopes too large to inline (BUCKET_NAME); "" keeps
	// every envelope inline, which caps envelopes at what an item can hold.
	BucketName string
	// S3PathStyle addresses the bucket by path (S3_PATH_STYLE=1): local S3
	// stand-ins have no per-bucket host names.
	S3PathStyle bool
	// Debug serves /debug (DEBUG=1). Never on a deployed stack by default.
	Debug bool
	// LeaseMs is the lease length (LEASE_MS); 0 means the relay default.
	LeaseMs int64
	// AwaitingPayloadMs is how long a site has to seal after a claim
	// (AWAITING_PAYLOAD_MS); 0 means the store's default, the reference's
	// 10 s.
	AwaitingPayloadMs int64
	// DueShards is how many shards the routing table's due index is spread
	// over (DUE_SHARDS); 0 means dynamo.DefaultDueShards. A table setting:
	// every function of one deployment must read the same value, which
	// template.yaml's DueShards parameter gives them all.
	DueShards int
	// SiteCopies is how many read copies of each site the control plane
	// keeps (SITE_COPIES); 0 means controlplane.DefaultSiteCopies. A table
	// setting, like DueShards (template.yaml's SiteCopies).
	SiteCopies int
	// UnsealedShards and FinishedShards are how many shards each site's
	// unsealed sets and finished list are spread over (UNSEALED_SHARDS,
	// FINISHED_SHARDS); 0 means the store's defaults. Table settings, as
	// DueShards.
	UnsealedShards int
	FinishedShards int
	// BasePath mounts the daemon plane (BASE_PATH); "" means /byollm.
	BasePath string
	// VerificationURL is where a human approves a pairing code
	// (VERIFICATION_URL); "" turns the device-code flow off (501).
	VerificationURL string
	// UpdateOffer and DaemonFloor are the daemon versions offered and
	// required (UPDATE_OFFER, DAEMON_FLOOR).
	UpdateOffer string
	DaemonFloor string
	// ChurnTopicARN receives unsealed-churn reports (CHURN_TOPIC_ARN); ""
	// only logs and counts them.
	ChurnTopicARN string
	// MetricsNamespace is the CloudWatch namespace of the EMF metrics
	// (METRICS_NAMESPACE); "" means "byorelay".
	MetricsNamespace string
	// Wake-up schedule for the sweeper (see wakeup.go): the schedule group
	// (WAKEUP_GROUP), the sweeper's ARN (SWEEPER_ARN) and the role the
	// Scheduler assumes to invoke it (WAKEUP_ROLE_ARN). All three, or no
	// wake-ups.
	WakeupGroup   string
	SweeperARN    string
	WakeupRoleARN string
	// GrantKeyParameter names the SSM SecureString parameter holding the
	// control-plane seed (GRANT_KEY_PARAMETER); "" hands out no key at
	// pairing and authors no grants, so paired daemons are in direct mode.
	// Set only on the functions that pair or claim: no other one needs it.
	GrantKeyParameter string
	// GrantKMSKeyID is the other place the control-plane key may be held
	// (GRANT_KMS_KEY_ID): an AWS KMS key of spec ECC_NIST_EDWARDS25519, by
	// key id or ARN, which signs each grant without the function ever
	// holding the key. At most one of the two is set.
	GrantKMSKeyID string
	// OriginSecretParameter names the SSM parameter holding the edge's
	// secret (ORIGIN_SECRET_PARAMETER); set, the relay refuses 403 every
	// request that does not carry it (or, during a rotation, the value of
	// the same name plus PreviousSuffix). "" serves everyone: no edge.
	OriginSecretParameter string
}

// EnvFromOS reads Env from the process environment.
func EnvFromOS() (Env, error) { return LoadEnv(os.Getenv) }

// LoadEnv reads Env through getenv, so tests need not touch the process
// environment.
func LoadEnv(getenv func(string) string) (Env, error) {
	e := Env{
		TableName:        getenv("TABLE_NAME"),
		BucketName:       getenv("BUCKET_NAME"),
		BasePath:         getenv("BASE_PATH"),
		VerificationURL:  getenv("VERIFICATION_URL"),
		UpdateOffer:      getenv("UPDATE_OFFER"),
		DaemonFloor:      getenv("DAEMON_FLOOR"),
		ChurnTopicARN:    getenv("CHURN_TOPIC_ARN"),
		MetricsNamespace: getenv("METRICS_NAMESPACE"),
		WakeupGroup:      getenv("WAKEUP_GROUP"),
		SweeperARN:       getenv("SWEEPER_ARN"),
		WakeupRoleARN:    getenv("WAKEUP_ROLE_ARN"),

		GrantKeyParameter:     getenv("GRANT_KEY_PARAMETER"),
		GrantKMSKeyID:         getenv("GRANT_KMS_KEY_ID"),
		OriginSecretParameter: getenv("ORIGIN_SECRET_PARAMETER"),
	}
	if e.TableName == "" {
		return Env{}, fmt.Errorf("lambdafn: TABLE_NAME is not set")
	}
	var err error
	if e.Debug, err = flag(getenv, "DEBUG"); err != nil {
		return Env{}, err
	}
	if e.S3PathStyle, err = flag(getenv, "S3_PATH_STYLE"); err != nil {
		return Env{}, err
	}
	if e.LeaseMs, err = positiveMs(getenv, "LEASE_MS"); err != nil {
		return Env{}, err
	}
	if e.AwaitingPayloadMs, err = positiveMs(getenv, "AWAITING_PAYLOAD_MS"); err != nil {
		return Env{}, err
	}
	if e.DueShards, err = shardCount(getenv, "DUE_SHARDS", dynamo.MaxDueShards); err != nil {
		return Env{}, err
	}
	if e.UnsealedShards, err = shardCount(getenv, "UNSEALED_SHARDS", dynamo.MaxSiteShards); err != nil {
		return Env{}, err
	}
	if e.FinishedShards, err = shardCount(getenv, "FINISHED_SHARDS", dynamo.MaxSiteShards); err != nil {
		return Env{}, err
	}
	if v := getenv("SITE_COPIES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > controlplane.MaxSiteCopies {
			return Env{}, fmt.Errorf("lambdafn: SITE_COPIES=%q is not a copy count from 1 to %d", v, controlplane.MaxSiteCopies)
		}
		e.SiteCopies = n
	}
	if e.MetricsNamespace == "" {
		e.MetricsNamespace = "byorelay"
	}
	if e.GrantKeyParameter != "" && e.GrantKMSKeyID != "" {
		// Two keys would be one handed to devices and one left to confuse:
		// which one signs is a choice the deployment makes, not this code.
		return Env{}, fmt.Errorf("lambdafn: GRANT_KEY_PARAMETER and GRANT_KMS_KEY_ID are two places for one key; set one")
	}
	set := 0
	for _, v := range []string{e.WakeupGroup, e.SweeperARN, e.WakeupRoleARN} {
		if v != "" {
			set++
		}
	}
	if set != 0 && set != 3 {
		// Half a wake-up configuration would fail on the first due job, in
		// the middle of a request, instead of at start.
		return Env{}, fmt.Errorf("lambdafn: WAKEUP_GROUP, SWEEPER_ARN and WAKEUP_ROLE_ARN must be set together")
	}
	return e, nil
}

// positiveMs reads an optional duration in milliseconds; 0 when unset.
func positiveMs(getenv func(string) string, name string) (int64, error) {
	v := getenv(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("lambdafn: %s=%q is not a positive integer", name, v)
	}
	return n, nil
}

// flag reads a boolean variable: "", "0" or "false" off, "1" or "true" on.
func flag(getenv func(string) string, name string) (bool, error) {
	switch v := getenv(name); v {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	default:
		return false, fmt.Errorf("lambdafn: %s=%q is not 0, 1, true or false", name, v)
	}
}

// shardCount is the shard count in variable name (1 to limit), 0 when it
// is unset.
func shardCount(getenv func(string) string, name string, limit int) (int, error) {
	v := getenv(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > limit {
		return 0, fmt.Errorf("lambdafn: %s=%q is not a shard count from 1 to %d", name, v, limit)
	}
	return n, nil
}
