// Package dynamo is the DynamoDB routing store: store.RoutingStore and
// store.PairingCodes over one table, so every Lambda instance is a replica
// and nothing is lost when one dies. The table is template.yaml's
// RoutingTable; CreateTable creates the same table for tests and local runs
// from Go values (tableInput), which a test holds equal to the template.
//
// # Items
//
//	J#<site>\0<jobId>     sk J: the job: stub, state, holder, clocks,
//	                      refusals, the result (inline JSON or an S3 key),
//	                      where its payload is, ver, wid, the last seal's,
//	                      completion's and release's marks; once removed, its
//	                      tombstone (gone, no ciphertext) until TTL; a
//	                      finished job is deleted by the sweep at its end
//	                      (below, "When a job ends")
//	                      sk EP#<id>: a payload, in an item of its own,
//	                      written once per seal (above 32 KiB: in S3)
//	                      sk END: the end item: the S3 keys of every
//	                      object the job wrote and the partitions of
//	                      every frame log its grants streamed (stream.go),
//	                      each named before it is first written
//	T#<tag>               the site a lease tag stands for (lease.go)
//	H#<runner>\0<jobId>   sk H#<site>: a hint that this runner held a job
//	                      with this bare id on that site
//	U#<site>[\0<n>]       sk <owner>: the pair's unsealed grants, as a set
//	                      of <leaseId>\0<jobId>\0<awaiting window end>, on
//	                      shard n of Config.UnsealedShards by the owner
//	                      (shard 0 the bare key); a site's sets, read
//	                      shard by shard, are its awaiting list (Awaiting)
//	K#<runner>            jobs cancelled while this runner held them
//	E#<site>\0<jobId>     eviction notice: the site's job was evicted; kept
//	                      until the site collects it (TTL past the deadline)
//	P#<runnerId>          presence
//	X#<site>\0<owner>     churn: expiry times in the window, last report
//	C#, CU#, CK#, CL#<n>  pending pairings, by device code, user code and
//	                      keypair, and the ledger of live codes in 16 shards
//	CL#<n>, P#<exp>#<key> beside its shard, each live pairing without its
//	                      device code: the operator's list, one Query a shard
//
// # Indexes (sparse)
//
//	queue     qk = Q#<site>\0<owner>\0<kind>\0<private|team>[\0stream]
//	          (the suffix for a live-stream job), or R#<runner>
//	          for a job re-offered only to one runner; sort seq (enqueue
//	          order). Only queued and awaiting-payload (unsealed),
//	          uncancelled jobs carry qk: an unsealed grant stays in the
//	          partition it was claimed from, so the first claim that
//	          reads the partition after its awaiting window ran out
//	          sweeps it, wherever its due entry is. Projection ALL.
//	sitelist  lk = S#<site>\0evicted: the site's eviction notices; sort
//	          seq. Keys only: the list reads the items back consistently.
//	          (The site's awaiting list is no index list: its pairs'
//	          sets name the jobs.)
//	due       dk = D#<shard>, du = when a sweep should next look at the job:
//	          its next deadline (deadlineAt, the awaiting window or the
//	          lease expiry, whichever is first), or earlier for a sealed
//	          grant, whose due time moves later only when a sweep reaches it
//	          or its seal moves it (below: a renewal never does); also
//	          unsealed sets, when their grants should be checked. The
//	          shard is an FNV hash of the key modulo Config.DueShards
//	          (DefaultDueShards, 256; DUE_SHARDS, template.yaml's
//	          DueShards). A removed job's tombstone carries no index key.
//	          dk = F#<site>[\0<n>], du = when the result was accepted: the
//	          site's finished list, the done jobs whose result it has not
//	          collected, on shard n of Config.FinishedShards by the job id
//	          (shard 0 the bare key), so a results page reads the newest
//	          from a moment on with one Query a shard (ResultsPage). No
//	          sweep reads it: every read treats a finished job as gone from
//	          its deadline (its grace for a collect), it is not reported
//	          Removed, and Finished reads every shard whole and leaves out,
//	          on the consistent read, the jobs past theirs.
//	          dk = ED#<shard>, du = deadlineAt + ResultGraceMs on a job's
//	          payload items and its end item: its end hooks, which bring
//	          the scheduled sweep back to delete its ciphertext (below).
//	          In-line sweeps never read these shards, so a request never
//	          pays for a job's end, and a backlog of ends cannot fill the
//	          in-line bound ahead of a lease it must enforce.
//
// # How a transition is written
//
// Every job write is a whole-item Put conditioned on the version it was
// decided on (ver), alone or, with the churn record or an eviction notice,
// in a TransactWriteItems. A failed condition means someone else changed
// the job: the operation reads again and decides again. No decision is
// written without the condition that makes it still true.
//
// Every write also stamps a fresh wid. When a write's answer is lost
// (timeout, connection reset, throttling after the fact), the job is read
// back: it carries the wid when the write committed and nothing was
// written over it since, so the caller gets the right answer instead of a
// guess. The rule: a write whose effect another call can observe, and that
// another call can write over before the read-back, also leaves an id only
// it writes and every later write keeps (they copy the item), and the
// read-back looks for that id too. A grant leaves its lease id (the site
// seals at once); a seal, a completion and a release their marks (sm, dm,
// rm: the device fetches at once, a heartbeat renews the done job, another
// runner claims the released one). Without it the claim answers no grant
// for a job ready under a lease nobody was told of, the seal too-late for
// a payload the device holds, the completion "duplicate" for the result it
// recorded (dropping its object), the release no for a job it let go.
// A fetch (TakePayload) leaves none: told it lost a race, it reads the job
// again, and a job running under its lease answers the envelope, so
// deciding again gives the answer its own write would have.
// Transactions also carry the wid as their ClientRequestToken. A sweep
// removes an unfinished job by writing its tombstone, not by deleting it,
// so a removal too is known to be this replica's own and is reported once.
// (A finished job, which is never reported, is deleted at its end: below.)
//
// # The unsealed cap without a transaction
//
// A claim writes, after its holder hint, two single items: the grant's
// member into the pair's unsealed set (an ADD conditioned on the set
// holding fewer than UnsealedPerPair, or already holding this member, so
// resending it after a lost answer is harmless), then the job, conditioned
// on its version. If the job write loses its race, the member is deleted
// again. One that ends an unsealed grant (seal, complete, release, sweep)
// frees the pair's slot right after it commits. The set's own check
// (repairSlots, through the due index) removes a member whose job is not
// awaiting under its lease, but only once the member's awaiting window,
// which the member names, and then the window's length again are over.
//
// The invariant: every live grant (awaiting-payload, its window not over)
// is in its pair's set, so the pair has at most UnsealedPerPair of them,
// across replicas. A member is added before its job can be awaiting under
// its lease, and leaves only (a) after the job left awaiting-payload under
// that lease, which it never re-enters; (b) after the claim's own job write
// lost its condition, so the grant was never made; (c) by the check, once
// the window is well past and the job was read not awaiting under the
// lease. In (c), a claim's job write that lands later still (its replica
// froze between the writes) lands a grant whose window is already over:
// Awaiting does not list it, so no site seals to it, and the sweep requeues
// it. The set may hold a member whose grant is over or not yet written: a
// stricter cap for a moment, never a looser one. The slack is a whole
// awaiting window, far more than the replicas' clocks may disagree by.
//
// The same invariant makes the sets the site's awaiting list: Awaiting is
// one strongly consistent Query of each of the site's set partitions
// (U#<site> shards, one item per owner), then a consistent BatchGet of the jobs its live members
// name, each kept only while awaiting under that member's lease and inside
// its window. So the job carries no awaiting-list index entry. (It keeps
// its queue index entry while unsealed, for a claim to find it once its
// window is over: the claim's write updates that entry instead of deleting
// it, and the seal deletes it.) The price of the sets: every claim, seal and
// check of a pair writes its set's shard, so a site's claims and seals
// together are bounded by UnsealedShards partitions' write throughput
// (1,000 small writes a second each: DefaultUnsealedShards has the
// sizing). A site's pending poll reads every shard, at most
// UnsealedPerPair members per owner.
//
// A lease id is a version 4 UUID whose first four bytes are a tag of its
// job's site (lease.go), so a holder-scoped call, which carries a job id
// and a lease but no site, resolves its grant with one strongly consistent
// read of the job, and no item points from the lease to the job. Anything
// else (stale-lease, not-found, …) reads the runner's holder hints for the
// job id (written before every claim, never deleted before their TTL) and
// the jobs they name, each judged by what it holds when read.
//
// Claim reads at most min(Max, UnsealedPerPair)+6 candidates from each queue
// partition the device may take from (its routes times its kinds, private
// partitions only on its owner's own routes, streaming partitions only for
// a device that opted in to live streams, and its sticky partition), so
// its cost depends on the route set and never on the depth of the queue.
// The partitions are fine-grained so that every candidate read passes the
// route, kind and audience guards: a bounded read is not starved by a deep
// queue of work this device can never run. Nor by jobs past their
// deadline that no sweep has removed yet: the read filters them out and
// reads past up to 100 of them per partition.
//
// Sweep reads the due index, so it costs what is due, not what is stored.
// The scheduled sweeper calls SweepPages (Sweep is the same pass,
// collecting its jobs for the contract's answer), which handles everything
// due: one worker per shard, request shards and end shards alike, at most
// maxInFlight at once, each reading its shard sweepPage entries at a time
// and handling a page before it reads the next, so its memory is a page
// per worker whatever the backlog. Goroutines in one invocation rather
// than an invocation per shard: the shards are few (2 x DueShards), a
// worker spends its time waiting on DynamoDB, not on CPU, and one
// invocation keeps one clock check and one report per run, where an
// invocation per shard would add a fan-out step and its failure modes. A
// due item whose handling fails is counted and skipped (it stays due, the
// next sweep retries it), and the pass ends with an error naming it. The
// oldest due entry's age when the pass started is its backlog, published
// as SweepBacklogSeconds and alarmed on in template.yaml.
//
// SweepInline, which Claim runs first and the relay's heartbeat and pending
// paths call, reads one request shard, the next in the Store's round robin
// from a random start, at most Options.InlineSweepLimit entries, and
// handles them (jobs and unsealed-set repairs alike): a backlog after an
// outage is never carried inside one request, a request pays one Query
// whatever the shard count, and the replicas' requests between them read
// every shard. What a request answers, and what it leaves behind, does not
// wait for a shard's turn:
//
//   - Claim, RenewLeases and Awaiting judge every deadline, window and
//     lease by the clock: Claim never grants a job past its deadline, and
//     a grant past its deadline, window or lease is over for the other two.
//   - A claim removes the jobs past their deadline that it reads at the
//     head of a queue partition, and sweeps an unsealed grant whose
//     awaiting window ran out, which stays in its queue partition for the
//     purpose (the queue index, above), before it judges the job again: so
//     the grant goes back to the device that abandoned it, the seal
//     attempt is counted, and the pair's slot is freed, as after a sweep.
//   - The relay's heartbeat ends the grants it reports lost (SweepLapsed,
//     store.LapseSweeper), and its pending read the site's unsealed grants
//     whose window ran out, found in the read of the site's sets that
//     lists the rest (SweepAwaiting, store.AwaitingSweeper), so each
//     answer leaves the job in the queue as the reference's sweep-first
//     answer does.
//
// These targeted sweeps take the budget the shard left, so a request still
// handles at most InlineSweepLimit items. Only which due items a bounded
// sweep picks differs from one reading everything: the earliest of one
// shard, not of all. The contract's cases that pin that pick run over one
// shard (contract_test.go). A lapsed lease of a sealed job nobody asks
// about waits for its shard's turn or the scheduled sweep.
//
// The shard count is a table setting (Config.DueShards). DefaultDueShards
// is 256: a job writes about 3 WCU of index entries on the request
// shards, so 10,000 jobs a second put 117 WCU/s on each (12% of a
// partition's 1,000), and the in-line sweeps of 1,000,000 idle daemons,
// about 0.2 Queries a daemon-second at 0.5 RCU, put 391 RCU/s on each (13%
// of 3,000): both under a sixth of a partition, so a fleet can grow
// several times before the count must be raised. 32 shards would run the
// writes at 94%.
//
// A seal moves its job's due entry from the awaiting window's end to the
// sealed job's next deadline (its lease expiry) only where that is cheaper
// than the later rewrite (sealMovesDue): for a live-stream job, and for a
// seal less than 2 s before the window ends, both of which outlive the
// window. The move costs the seal two index writes (a delete and a put of
// the entry); left in place, the entry costs nothing if the job is done
// before the window ends, and otherwise a sweep's visit: a consistent read
// of the job, a write of the whole item and the same two index writes. A
// seal early in the window, the usual case, leaves it: most such jobs are
// done first. A renewal never moves it: it would pay the two index writes
// on every heartbeat to save one visit a lease.
//
// A payload is written to an item of its own before the seal that names it,
// so the later writes of the job (fetch, renewals, result, removal) are not
// billed for it; a requeue deletes it. A result stays inline: nothing but
// the job's end writes the job after it. Envelopes whose JSON is larger
// than Config.InlineEnvelopeBytes (32 KiB by default) are written to S3
// (Config.Objects) before the job write that points at them and deleted
// after the write that drops them; each is first named in the job's end
// item, so none is left behind by a crash or a failed delete.
//
// # When a job ends
//
// Nothing of a job's ciphertext outlives the job, as in the reference,
// whose sweep drops the job with its payload and result at the deadline:
// TTL deletes within days, not at the time it names, and the bucket's
// lifecycle rule at best a day later, so neither may be what removes
// sealed envelopes. An unfinished job ends at its deadline: the sweep
// that writes its tombstone deletes its payload item, its objects, its
// streams' frames and its end item in the same pass. A finished job ends
// at its deadline plus the result grace (store.ResultGraceMs: a collect
// may list its result until then), payload included: no read returns the
// payload of a done job, and its result must stay. A cancel ends nothing
// (the reference keeps the job for its holder to report), so a cancelled
// job ends on one of these two paths.
//
// A done job is on its site's finished list, not on the sweep's shards,
// so something else brings the scheduled sweep back at its end: its payload item,
// which carries a due entry at the job's end (one index write at the
// seal), or, for a job finished without one, its end item (written by
// Complete, or already there for an S3 object or a stream). The sweep
// (endJob) deletes the finished job's item, conditioned on its version,
// then the partition's payload items and last its end item, after the
// objects and stream partitions that names; only items whose own deadline
// is over (a job published again under the same id has a later one). A
// delete that fails stops nothing else the sweep does: what it could not
// delete stays on the due index and falls due again a minute later
// (endRetryMs), so a later sweep retries it; if the job item itself could
// not be deleted, no hook is deleted either. TTL and the lifecycle rule
// (1 day) remain only as backstops. Each object delete that fails, on a
// request or in a sweep, is told to Config.OnObjectDeleteFailed: the
// functions count it as EnvelopeDeleteFailures, and template.yaml alarms
// when the sweeper's keep failing (a missing grant, a bucket policy),
// which no retry can cure.
//
// We chose deleting at the end over the cheaper alternative, an item TTL
// at the deadline with every read refusing what is past it: that leaves
// ciphertext in the table for as long as TTL takes (days) and in the
// bucket for a day, which is what the reference's drop at the deadline
// rules out, and a TTL cannot delete an S3 object at all. The price, on a
// small job: one index write at the seal (the payload item's due entry),
// and at the end a consistent read of the job, a Query of its partition
// and the deletes of the job item with its inline result and of the
// payload item, each with its index entry, where TTL deleted for nothing
// (docs/cost.md, "Deleting a job's ciphertext at its end", has the
// measured price).
//
// Every write is billed per started KB of the whole item, so the job item
// keeps its bytes few (compact.go): an envelope's ciphertext and the
// holder's device identity, base64url text on the wire, are stored as
// bytes (a B attribute, a quarter smaller) whenever they decode and encode
// back to exactly the same text, and as JSON otherwise; an envelope's other
// fields are JSON under one-letter names; the site and job id are not
// stored beside the key that holds them. A small job's finished item
// (about 1 KB of result ciphertext) stays under 2 KB.
package dynamo
