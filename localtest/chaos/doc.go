// Package chaos is the chaos test: replicas of `byorelay serve` on one
// DynamoDB Local table, Go sites and Go daemons as separate processes,
// every request sent to a random replica, and replicas and daemons killed
// with SIGKILL and restarted at random while the sites publish. At the end
// it prints how every job ended (verified, failed, cancelled, expired,
// evicted) and what must never happen (lost, duplicated, wrong), and fails
// unless the last three are zero.
//
// The test binary is every process: TestChaos coordinates, and re-executes
// itself as a site or a daemon (BYORELAY_CHAOS_ROLE). The replicas are a
// freshly built `byorelay` binary. `make test` runs a short smoke;
// `make chaos` the full run (BYORELAY_CHAOS_JOBS, default 10,000 there).
//
// Sites are not killed: the Go site SDK keeps its jobs (the at-rest payloads
// it seals from, the devices it sealed to) in memory, so a killed site
// loses its jobs by construction (the site app on the cloud lane keeps
// them in the site job store instead, and localtest/siterestart kills
// that). What is killed is what a deployment
// loses without warning: relay instances and users' machines.
package chaos
