package relay

import (
	"sync"

	"github.com/byorelay/byorelay/protocol"
)

// resultRows keeps each listed result's encoded row. A site's results poll
// lists every result it has not collected until the job's deadline (the
// reference's GET has no acknowledgement), so a done job is listed on many
// polls, and re-encoding its envelope each time was most of the memory
// relay's CPU. A row is encoded once and reused while the store still
// reports the same row (compared field by field, envelope included, so a
// changed row is never served stale); a site's rows not listed by its
// latest poll are dropped. It holds encodings only, never routing state:
// an empty cache, or another replica's, changes no answer.
//
// A poll updates its site's rows in place, under the lock: building a new
// map of every listed row on every poll (hundreds of rows, many polls a
// second) was itself a large share of the relay's allocation.
type resultRows struct {
	mu    sync.Mutex
	sites map[string]*siteRows
	bytes int    // encoded bytes across sites
	poll  uint64 // counts encode calls; marks the rows each one listed
}

// siteRows is one site's rows by job id, and their encoded size.
type siteRows struct {
	rows  map[string]*cachedRow
	bytes int
}

type cachedRow struct {
	row     protocol.SiteResult
	encoded protocol.Encoded
	poll    uint64 // the latest encode call that listed it
}

// maxCachedRowBytes bounds the encodings kept across sites; past it rows
// are encoded per poll, as without the cache. Envelopes reach 6 MiB, and a
// function's memory is not the site's to fill.
const maxCachedRowBytes = 16 << 20

// encode is rows encoded, from the cache where the row is unchanged; the
// site's cache becomes exactly these rows.
func (c *resultRows) encode(siteID string, rows []protocol.SiteResult) ([]protocol.Encoded, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sites == nil {
		c.sites = map[string]*siteRows{}
	}
	site := c.sites[siteID]
	if site == nil {
		site = &siteRows{rows: map[string]*cachedRow{}}
	}
	c.bytes -= site.bytes
	delete(c.sites, siteID) // put back below if within the budget
	c.poll++
	out := make([]protocol.Encoded, 0, len(rows))
	for _, row := range rows {
		hit := site.rows[row.JobID]
		if hit == nil || !sameResult(hit.row, row) {
			b, err := protocol.MarshalJS(row)
			if err != nil {
				return nil, err
			}
			if hit == nil {
				hit = &cachedRow{}
				site.rows[row.JobID] = hit
			}
			site.bytes += len(b) - len(hit.encoded)
			hit.row, hit.encoded = row, b
		}
		hit.poll = c.poll
		out = append(out, hit.encoded)
	}
	for id, r := range site.rows {
		if r.poll != c.poll {
			site.bytes -= len(r.encoded)
			delete(site.rows, id)
		}
	}
	if c.bytes+site.bytes <= maxCachedRowBytes {
		c.sites[siteID] = site
		c.bytes += site.bytes
	}
	return out, nil
}

// sameResult reports whether a and b encode alike.
func sameResult(a, b protocol.SiteResult) bool {
	return a.JobID == b.JobID && a.Disposition == b.Disposition && a.RunnerID == b.RunnerID &&
		a.LeaseID == b.LeaseID && a.RunnerOwner == b.RunnerOwner &&
		samePointee(a.Envelope, b.Envelope) && samePointee(a.Device, b.Device)
}

func samePointee[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
