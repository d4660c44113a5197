package lambdafn

import (
	"log/slog"
	"strings"
	"testing"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestLoadEnvReadsEveryVariable(t *testing.T) {
	e, err := LoadEnv(envOf(map[string]string{
		"TABLE_NAME": "t", "BUCKET_NAME": "b", "S3_PATH_STYLE": "1", "DEBUG": "true", "LEASE_MS": "30000",
		"AWAITING_PAYLOAD_MS": "4000", "DUE_SHARDS": "64", "SITE_COPIES": "32", "UNSEALED_SHARDS": "32", "FINISHED_SHARDS": "128",
		"BASE_PATH": "/x", "VERIFICATION_URL": "https://cp/verify", "UPDATE_OFFER": "0.1.2", "DAEMON_FLOOR": "0.1.0",
		"CHURN_TOPIC_ARN": "arn:topic", "WAKEUP_GROUP": "g", "SWEEPER_ARN": "arn:fn", "WAKEUP_ROLE_ARN": "arn:role",
		"GRANT_KEY_PARAMETER": "/byorelay/grant-key",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := Env{TableName: "t", BucketName: "b", S3PathStyle: true, Debug: true, LeaseMs: 30000, AwaitingPayloadMs: 4000, DueShards: 64, SiteCopies: 32, UnsealedShards: 32, FinishedShards: 128, BasePath: "/x",
		VerificationURL: "https://cp/verify", UpdateOffer: "0.1.2", DaemonFloor: "0.1.0", ChurnTopicARN: "arn:topic",
		MetricsNamespace: "byorelay", WakeupGroup: "g", SweeperARN: "arn:fn", WakeupRoleARN: "arn:role",
		GrantKeyParameter: "/byorelay/grant-key"}
	if e != want {
		t.Fatalf("env = %+v\nwant  %+v", e, want)
	}
}

func TestLoadEnvRefusesWhatWouldFailLater(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"no table", map[string]string{}, "TABLE_NAME"},
		{"a lease that is not a number", map[string]string{"TABLE_NAME": "t", "LEASE_MS": "1m"}, "LEASE_MS"},
		{"a lease of zero", map[string]string{"TABLE_NAME": "t", "LEASE_MS": "0"}, "LEASE_MS"},
		{"an awaiting window of zero", map[string]string{"TABLE_NAME": "t", "AWAITING_PAYLOAD_MS": "0"}, "AWAITING_PAYLOAD_MS"},
		{"no due shards", map[string]string{"TABLE_NAME": "t", "DUE_SHARDS": "0"}, "DUE_SHARDS"},
		{"more due shards than allowed", map[string]string{"TABLE_NAME": "t", "DUE_SHARDS": "5000"}, "DUE_SHARDS"},
		{"no site copies", map[string]string{"TABLE_NAME": "t", "SITE_COPIES": "0"}, "SITE_COPIES"},
		{"more site copies than allowed", map[string]string{"TABLE_NAME": "t", "SITE_COPIES": "5000"}, "SITE_COPIES"},
		{"no unsealed shards", map[string]string{"TABLE_NAME": "t", "UNSEALED_SHARDS": "0"}, "UNSEALED_SHARDS"},
		{"more finished shards than allowed", map[string]string{"TABLE_NAME": "t", "FINISHED_SHARDS": "257"}, "FINISHED_SHARDS"},
		{"a debug flag that is neither", map[string]string{"TABLE_NAME": "t", "DEBUG": "yes"}, "DEBUG"},
		{"half a wake-up configuration", map[string]string{"TABLE_NAME": "t", "WAKEUP_GROUP": "g"}, "WAKEUP_GROUP"},
		{"two places for the grant key", map[string]string{"TABLE_NAME": "t", "GRANT_KEY_PARAMETER": "/k", "GRANT_KMS_KEY_ID": "k"}, "GRANT_KMS_KEY_ID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadEnv(envOf(tt.env))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one naming %s", err, tt.want)
			}
		})
	}
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }
