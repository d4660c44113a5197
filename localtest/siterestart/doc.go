// Package siterestart is the cloud lane's restart test: a Go site app
// (siteserver on the cloud lane, its jobs in the site job store on
// DynamoDB Local) publishes jobs through byorelay's local stack (every
// function behind the local API server, on DynamoDB Local) to one daemon,
// and is killed with SIGKILL at chosen moments (a job not yet sealed, a job
// sealed and running, a result waiting at the relay) and restarted on the
// same site table, again and again, until every job has ended. Then every
// job must have ended exactly once, in the store, with a verified result
// whose text is what the daemon's model produced, or with a reason.
//
// A third run publishes a streaming job to a Go daemon that streams it a
// word at a time, kills the site app once it has read a few deltas of the
// live stream, restarts it, and requires the new incarnation to read the
// stream to its seal (from the grant and checkpoint in the store) with
// text equal to the job's verified result.
//
// It runs with the Go daemon (client/daemon, echo backend) and with the
// real byollm 0.1.1 daemon (localtest/peers, a stand-in model). The test
// binary is the site process too: TestMain re-executes it as the site
// (BYORELAY_SITERESTART_ROLE). `make test` runs a short smoke; `make
// site-restart RUNS=10 JOBS=…` runs it repeatedly.
package siterestart
