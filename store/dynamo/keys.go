package dynamo

import (
	"hash/fnv"
	"strconv"
	"strings"
)

// Item keys. One table holds every kind of item; the pk prefix says which.
// NUL separates the parts of a composite key because it can appear in
// neither a site id, an owner id nor a job id (the reference's routeKey), so
// a key is a key rather than a parser.
const (
	skJob      = "J"
	skTag      = "T"
	skPresence = "P"
	skChurn    = "X"
	skPairing  = "C"
	skCancels  = "K"
	skEvicted  = "E"
	// skEnd, under a job's partition key, is the job's end hook: on the
	// due index at its deadline plus the result grace, and naming the
	// envelope objects its job wrote to S3 (envelope.go, endJob).
	skEnd = "END"
)

// jobPK is a job, keyed by (site, id): job ids are each site's to choose.
func jobPK(siteID, jobID string) string { return "J#" + siteID + "\x00" + jobID }

// tagPK says which site a lease tag stands for (lease.go).
func tagPK(tag string) string { return "T#" + tag }

// holderPK partitions the hints that a runner held a job with this bare id,
// one item per site (holderSK): the fallback that tells stale-lease from
// not-found, read with one consistent query.
func holderPK(runnerID, jobID string) string { return "H#" + runnerID + "\x00" + jobID }
func holderSK(siteID string) string          { return "H#" + siteID }

// cancelsPK lists the jobs that were cancelled while this runner held them,
// so a heartbeat reads one item instead of every job.
func cancelsPK(runnerID string) string { return "K#" + runnerID }

// unsealedPK and unsealedSK key a (site, job owner) pair's unsealed set: the
// members of its unsealed grants, whose size is the cap (slots.go). A site's
// sets are spread over Config.UnsealedShards partitions by a hash of the
// owner (unsealedShard), so a busy site's claims and seals are not one
// partition's 1,000 WCU/s; the site's awaiting list is one strongly
// consistent Query of each (Awaiting). Shard 0 is the bare U#<site>, the
// key of a table whose count is 1, so raising the count from 1 leaves
// every set where a reader looks.
func unsealedPK(siteID string, shard int) string { return shardKey("U#"+siteID, shard) }
func unsealedSK(owner string) string             { return owner }

// unsealedShard is the shard of shards that holds owner's set on a site.
func unsealedShard(owner string, shards int) int { return hashShard(owner, shards) }

// unsealedSite is the site of an unsealed set's pk, whatever its shard.
func unsealedSite(pk string) string {
	site, _, _ := strings.Cut(strings.TrimPrefix(pk, "U#"), "\x00")
	return site
}

// shardKey is base's shard: base itself for shard 0, else base, NUL and
// the shard number (NUL appears in no site id, so no site's key is
// another's shard).
func shardKey(base string, shard int) string {
	if shard == 0 {
		return base
	}
	return base + "\x00" + strconv.Itoa(shard)
}

func hashShard(s string, shards int) int {
	h := fnv.New32a()
	h.Write([]byte(s))
	return int(h.Sum32() % uint32(max(shards, 1)))
}

// evictedPK is the notice a sweep leaves when it evicts a job, so the site
// hears of it; it lasts until the site collects it or the deadline passes.
func evictedPK(siteID, jobID string) string { return "E#" + siteID + "\x00" + jobID }

// evictedList is the site list of eviction notices.
const evictedList = "evicted"

func presencePK(runnerID string) string { return "P#" + runnerID }

func churnPK(siteID, owner string) string { return "X#" + siteID + "\x00" + owner }

// Pairing items: the pending pairing by device code, pointers by user code
// and by keypair, and one ledger of live codes that carries the ceiling.
func pairingPK(deviceCode string) string { return "C#" + deviceCode }
func userCodePK(userCode string) string  { return "CU#" + userCode }
func keypairPK(identity string) string   { return "CK#" + identity }

// ledgerShards is how many items the pairing ledger is spread over. Every
// pairing start writes its shard through a compare-and-set; on one item
// every start in the relay races every other for it, and concurrent
// starters lose, retry and run out of attempts (docs/performance.md has
// the measured rate). A keypair's codes always go to one shard
// (ledgerShard), so one keypair's replacement stays one transaction.
const ledgerShards = 16

// ledgerPK is a ledger shard's partition: its count of live codes (sk C)
// and its part of the operator's list (pairing_list.go).
func ledgerPK(shard int) string { return "CL#" + strconv.Itoa(shard) }

// ledgerShard is the shard that counts and lists identity's codes.
func ledgerShard(identity string) int {
	h := fnv.New32a()
	h.Write([]byte(identity))
	return int(h.Sum32() % ledgerShards)
}

// Queue index partitions. A queued job sits in exactly one: its (site, job
// owner, kind, audience) partition, or, once a site abandoned a grant on
// it, the sticky partition of the one runner it may go back to. Splitting by
// kind and audience means the candidates a claim reads are ones it may
// take, so a bounded read is not starved by a deep queue of work this
// device can never run. Live-stream jobs (docs/streaming.md) queue apart,
// for the same reason: only a device that opted in may take them, and it
// reads both.
func queueKey(siteID, owner, kind string, private, streaming bool) string {
	class := "team"
	if private {
		class = "private"
	}
	if streaming {
		class += "\x00stream"
	}
	return "Q#" + siteID + "\x00" + owner + "\x00" + kind + "\x00" + class
}

func stickyQueueKey(runnerID string) string { return "R#" + runnerID }

// siteListKey is a site's list in the sitelist index: only the eviction
// notices (evictedList) are listed there now.
func siteListKey(siteID string, state string) string { return "S#" + siteID + "\x00" + state }

// dueKey spreads the due index over shards so one partition does not take
// every deadline write. key is the item's pk (a job), or its pk and sk (a
// pair's unsealed set: a site's sets share a pk).
func dueKey(key string, shards int) string {
	h := fnv.New32a()
	h.Write([]byte(key))
	return "D#" + strconv.Itoa(int(h.Sum32()%uint32(shards)))
}

func dueShardKey(shard int) string { return "D#" + strconv.Itoa(shard) }

// endDueKey is where a job's end hooks (its payload items and its end
// item) sit on the due index: shards of their own, which only the
// scheduled sweep reads. Deleting a finished job's ciphertext is not a
// request's business; on a request's shards the hooks would put that work
// (a read, a query and a few deletes a job) inside claims and heartbeats,
// and a backlog of them at the head of a shard would fill the in-line
// sweep's bound before any lease it must enforce.
func endDueKey(pk string, shards int) string { return "E" + dueKey(pk, shards) }

func endDueShardKey(shard int) string { return "E" + dueShardKey(shard) }

// finishedKey is a shard of a site's finished list: a partition of the
// due index (sort key: when the result was accepted) that no sweep reads.
// A result goes to the shard of its job id (finishedShard) over
// Config.FinishedShards, so a busy site's completions are not one
// partition's 1,000 WCU/s; the site's reads fan over every shard. Shard 0
// is the bare F#<site>, as for the unsealed sets.
func finishedKey(siteID string, shard int) string { return shardKey("F#"+siteID, shard) }

// finishedShard is the shard of shards that lists job jobID's result.
func finishedShard(jobID string, shards int) int { return hashShard(jobID, shards) }
