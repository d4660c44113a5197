package lambdafn

import (
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/wakeup"
)

// WakeupInput is the sweeper's event payload when a wake-up fires.
const WakeupInput = `{"trigger":"wakeup"}`

// newSweeperWaker sets the sweeper's one-time wake-ups in schedule group,
// invoking targetARN as roleARN, timed by the store's clock.
//
// Why it earns its place: a claim opens a 10 s awaiting-payload window. If
// the site never seals and no device claims, heartbeats or polls pending
// afterwards, nothing in-line notices, and the job (and its pair's
// unsealed slot) waits for the periodic sweep. The periodic schedule can
// then stay slow (a backstop that costs nothing while the relay is idle)
// and the sweeper still runs soon after a deadline that matters.
func newSweeperWaker(cfg aws.Config, endpoint, group, targetARN, roleARN string, clk clock.Clock) *wakeup.Waker {
	return wakeup.New(cfg, wakeup.Config{
		Group: group, TargetARN: targetARN, RoleARN: roleARN, Input: WakeupInput,
		Prefix: "wake-", Description: "byorelay sweeper wake-up for a claim deadline",
		Endpoint: endpoint, Clock: clk,
	})
}
