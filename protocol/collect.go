package protocol

// byorelay's one addition to the site plane, outside @byollm/protocol 0.1.1.
//
// The reference lists every finished job on every results poll until its
// deadline, and drops an evicted job without telling the site. A site SDK
// that knows byorelay POSTs to /relay/site/results (siteId and
// protocolVersion in the query, as for the GET) with a CollectRequest: the
// relay forgets the results and eviction notices the site has taken, then
// answers a CollectResponse, which is the GET's answer plus the eviction
// notices. A reference relay checks no method, reads siteId from the query
// and signs over the body it was sent, so it answers the same POST with its
// plain results list, which decodes as a CollectResponse with no evictions:
// the same client works against both, and a stock @byollm/server, which
// only ever GETs, sees the reference's behaviour.

// MaxCollect is the most job ids one CollectRequest may name.
const MaxCollect = 1000

// ResultGraceMs is how long after a job's deadline a collect still lists a
// result the relay accepted before that deadline. The relay takes no
// result once the deadline has passed, but one it accepted in the last
// instant would otherwise be listed to no poll: the site's next poll comes
// after the deadline, and the reference's listing ends there. So a site
// polls once more after a job's deadline (ExpiryMarginMs after it) before
// it calls the job expired, and that poll has the rest of the grace to
// reach the relay. The GET, which a stock @byollm/server uses, keeps the
// reference's listing.
const ResultGraceMs = 60_000

// ExpiryMarginMs is how long after a job's deadline, by the site's clock, a
// site's results poll must be sent for its answer to settle the job: a
// result the relay accepted before the deadline by the relay's clock is in
// it. The margin covers what separates the two: the relay's clock from the
// site's (a byorelay replica's is DynamoDB's, known to within a second,
// and replicas differ by up to twice that), and a result's write landing
// after the relay decided to accept it (a slow write on a loaded store).
const ExpiryMarginMs = 10_000

// CollectRequest names the jobs whose fates the site has taken: results it
// has judged and eviction notices it has read.
type CollectRequest struct {
	ProtocolVersion string   `json:"protocolVersion"`
	SiteID          string   `json:"siteId"`
	Collected       []string `json:"collected"`
}

// CollectResponse is the results list plus the ids of the site's jobs the
// relay evicted (the third unsealed expiry) and the site has not collected.
type CollectResponse struct {
	Jobs    []SiteResult `json:"jobs"`
	Evicted []string     `json:"evicted,omitempty"`
}

// Validate implements Validator.
func (r CollectRequest) Validate() error {
	var c check
	c.version(r.ProtocolVersion)
	c.str("siteId", r.SiteID, 0)
	if len(r.Collected) > MaxCollect {
		c.fail("collected", "must name at most 1000 jobs")
	}
	for i, id := range r.Collected {
		c.str(index("collected", i), id, 0)
	}
	return c.err
}

// Validate implements Validator.
func (r CollectResponse) Validate() error {
	var c check
	c.sub("", SiteResultsResponse{Jobs: r.Jobs}.Validate())
	for i, id := range r.Evicted {
		c.str(index("evicted", i), id, 0)
	}
	return c.err
}
