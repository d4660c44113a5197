package siteconformance

import "testing"

// TestOnlyTheKitsOwnPauseIsRunAgain: a report is run again only when
// every failure it names is a known fixed-pause check in its own words.
func TestOnlyTheKitsOwnPauseIsRunAgain(t *testing.T) {
	const pass = "  ✓ C002_JOB_ROUND_TRIP  an enqueued job runs on the owner's daemon and the result comes back  (502ms)\n"
	const c003 = "  ✗ C003_UNKNOWN_KIND_REFUSED  a daemon is never handed a kind it did not advertise  (277ms)\n" +
		"      the advertised kind never reached the backend\n"
	cases := []struct {
		name   string
		report string
		want   bool
	}{
		{"C003's pause alone", pass + c003 + "\n  1 of 32 checks failed — not compatible.\n", true},
		{"C003 in other words", pass + "  ✗ C003_UNKNOWN_KIND_REFUSED  a daemon is never handed a kind it did not advertise  (277ms)\n" +
			"      a job for an advertised kind was not taken (state: queued)\n", false},
		{"C003 and another", pass + c003 + "  ✗ C010_RESULT_IDEMPOTENT  the first terminal outcome wins  (330ms)\n      the second result won\n", false},
		{"another alone", pass + "  ✗ C010_RESULT_IDEMPOTENT  the first terminal outcome wins  (330ms)\n      the second result won\n", false},
		{"no failed check named", "byollm-certify: cannot load the target\n", false},
	}
	for _, c := range cases {
		if got := onlyKitTimingFailed(c.report); got != c.want {
			t.Errorf("%s: onlyKitTimingFailed = %v, want %v", c.name, got, c.want)
		}
	}
}
