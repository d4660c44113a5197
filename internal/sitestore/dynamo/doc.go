// Package dynamo is the site store on DynamoDB: every Lambda instance over
// one table is a replica, and nothing is lost when one dies.
//
// # Items (table SiteTable in site-template.yaml, keys pk and sk)
//
//	JOB#<id>    JOB           the job: its record as JSON (doc) without the
//	                          envelope, a version (ver) and the id of the
//	                          write that made it (wid), plus index keys
//	JOB#<id>    ENV           the at-rest envelope, written once at create,
//	                          read only by Get (fetch), deleted once the
//	                          job has ended (Store.ended; TTL, a day past
//	                          the envelope's deadline, is the backstop)
//	CKPT#<id>   LEASE#<lease> the stream checkpoint of the job's run
//	                          under that lease (seq, sealed envelope),
//	                          written by a conditional PutItem only above
//	                          the stored seq; TTL as ENV's
//	DEP#<dep>   JOB#<id>      an edge: job <id> depends on <dep>
//	RUNNER#<id> RUNNER        a runner
//	PAIR#<hash> PAIR          a pairing, by the hash of its device code
//	CODE#<code> CODE          which pairing holds a user code, until when
//
// # Indexes
//
//	claimable  qpk = Q#P#<owner> (private) or Q#T (team), qsk = claimableAt
//	           zero-padded then id: claim order. Queued, unblocked jobs,
//	           and jobs a runner holds at their lease expiry, so the first
//	           claim after a lease lapses finds the job without a sweep.
//	due        dpk = DUE#<shard>, dsk = sitestore.DueAt (lease expiry, TTL
//	           end, deadline, plus the relay's grace for a job sealed to a
//	           device); or dpk = UNBLOCK#<shard>, dsk = completion time, on
//	           a job completed ok whose dependents have not all been told
//	           yet. The shard is an FNV hash of the job id modulo
//	           Config.DueShards (default DefaultDueShards, 64: 10,000 jobs
//	           a second at about three due writes a job is under half of a
//	           partition's write limit per shard).
//	group      gpk//	group      gpk = HELD#<runner>, gsk = job id: what a runner holds (its
//	           cancel requests, ClaimedBy); gpk = RUNNERS, gsk =
//	           <owner>#<id>: every runner; gpk = UNPUBLISHED, gsk = job
//	           id: cloud-lane jobs whose stub the relay has not accepted.
//
// # How a decision is made atomic
//
// Every job mutation is one rule from package sitestore applied to the job
// as read, written back with PutItem conditioned on the version read
// (ver = :v). A failed condition means another replica wrote first: the job
// is read again (consistently) and the rule decides again. Claim decides
// from the claimable index's copy and falls back to that loop on conflict,
// which plays the part of SKIP LOCKED. A write whose answer was lost is
// recognised by its write id (wid) on the re-read, so a claim that landed is
// not mistaken for a lost race.
//
// # Dependencies
//
// Unblocking is race-free without a trigger or a transaction across jobs:
// whoever completes a job ok first writes it (with the UNBLOCK marker), then
// reads its edges and, for each dependent, all of that dependent's
// dependencies, consistently; whoever creates a dependent first writes it
// and its edges, then reads its dependencies. Of two writes each followed
// by a read of the other's item, at least one read sees the other's write,
// so the last dependency to complete, or the creator, always sees "all ok"
// and sets claimableAt, under the version condition, once. The marker is
// cleared when every dependent has been told; a completer that died in
// between is finished by the sweep.
//
// # Sweeps
//
// An in-line sweep (a claim, a heartbeat) reads one due shard and its
// unblock shard, the next in the instance's round robin from a random
// start, at most InlineSweepLimit items: every shard is read by someone,
// and a request pays for one. Nothing it leaves is answered wrongly:
// Claim and RenewLeases judge each job they touch by the clock, and a
// lapsed lease is in the claimable index. The scheduled sweep (Sweep)
// reads every shard: one goroutine per shard at a time, at most
// SweepWorkers of them, each page by page (sweepPage ids), so its memory
// is bounded by workers x page whatever the backlog; a failed item is
// counted and left for the next run. It also reads the shards of
// PreviousDueShards and the unsharded DUE and UNBLOCK partitions, so
// entries written under another shard count are still found; an entry
// moves to the current count's shard when its job is next written.
//
// # Runners
//
// A runner item is in the group index (RUNNERS), every attribute
// projected, so any write of it writes the index. A heartbeat writes it
// only when the capabilities or the daemon version changed, or the stored
// heartbeat time is RunnerRefreshMs (15 s) old; otherwise its condition
// fails and nothing is written. At the daemon's 10 s heartbeat that is one
// write in two, and the stored time is at most 15 s behind, inside the
// site's 35 s liveness window with a heartbeat to spare.
//
// # Subscribe across processes
//
// With Config.AWS (or Config.Streams) set, Subscribe also reads the table's
// DynamoDB stream (KEYS_ONLY, enabled in site-template.yaml and in
// CreateTable) while anyone is subscribed, and calls the watchers of each
// written job: a write by any process reaches every subscriber within
// StreamHeardWithin (each shard polled every StreamPollEvery). A reader
// that restarts (a failed call, an expired iterator) resumes each shard
// after the last sequence number it read, so missed records are read then,
// not lost, and it calls every watcher once, so what the stream no longer
// holds is covered by the waiter's re-read of the store. A subscriber may
// hear one write more than once; onChange means "re-read", never "one
// write". Without AWS, Subscribe hears only this instance's writes.
//
// Nothing on a request path scans: claims query two claimable partitions,
// sweeps query the due index, lists query the group index. Reset (the
// test-only admin listener's clean slate) is the one scan.
package dynamo
