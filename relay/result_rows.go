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
type resultRows struct {
	mu    sync.Mutex
	sites map[string]siteRows
	bytes int // encoded bytes across sites
}

// siteRows is one site's rows by job id, and their encoded size.
type siteRows struct {
	rows  map[string]cachedRow
	bytes int
}

type cachedRow struct {
	row     protocol.SiteResult
	encoded protocol.Encoded
}

// maxCachedRowBytes bounds the encodings kept across sites; past it rows
// are encoded per poll, as without the cache. Envelopes reach 6 MiB, and a
// function's memory is not the site's to fill.
const maxCachedRowBytes = 16 << 20

// encode is rows encoded, from the cache where the row is unchanged; the
// site's cache becomes exactly these rows.
func (c *resultRows) encode(siteID string, rows []protocol.SiteResult) ([]protocol.Encoded, error) {
	c.mu.Lock()
	old := c.sites[siteID].rows
	c.mu.Unlock()
	out := make([]protocol.Encoded, 0, len(rows))
	next := make(map[string]cachedRow, len(rows))
	size := 0
	for _, row := range rows {
		if hit, ok := old[row.JobID]; ok && sameResult(hit.row, row) {
			out = append(out, hit.encoded)
			next[row.JobID] = hit
			size += len(hit.encoded)
			continue
		}
		b, err := protocol.MarshalJS(row)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
		next[row.JobID] = cachedRow{row: row, encoded: b}
		size += len(b)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sites == nil {
		c.sites = map[string]siteRows{}
	}
	c.bytes -= c.sites[siteID].bytes
	delete(c.sites, siteID)
	if c.bytes+size <= maxCachedRowBytes {
		c.sites[siteID] = siteRows{rows: next, bytes: size}
		c.bytes += size
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
