package controlplane

import (
	"cmp"
	"encoding/json"
	"slices"
	"time"

	"github.com/byorelay/byorelay/internal/projection"
)

// maxDiffCells bounds the alignment of one list before and after a change.
// A change reads one tenant's partitions, tens of records; a list long
// enough to pass this is a partition that should not have grown so.
const maxDiffCells = 4_000_000

// diff is what turns after back into records: per list, the longest run of
// records left as they were is kept, a record changed in place keeps its
// seq (its place), a record added takes a seq between its neighbours, and
// a record gone is deleted. recs are the records before was assembled
// from.
func diff(before, after projection.Fixture, recs []record, now time.Time) (put, del []record, err error) {
	old := map[byte][]record{}
	seen := map[recordID]bool{}
	for _, r := range recs {
		if !seen[r.id()] {
			seen[r.id()] = true
			old[r.kind()] = append(old[r.kind()], r)
		}
	}
	for k := range old {
		slices.SortStableFunc(old[k], func(a, b record) int { return cmp.Compare(a.Seq, b.Seq) })
	}
	lists := []struct {
		kind byte
		next []record
	}{
		{'S', wrap(after.Sites, func(v *projection.SiteRecord) record { return record{Site: v} })},
		{'C', wrap(after.Consents, func(v *projection.ConsentRecord) record { return record{Consent: v} })},
		{'D', wrap(after.Devices, func(v *projection.DeviceRecord) record { return record{Device: v} })},
		{'R', wrap(after.Rosters, func(v *projection.RosterRecord) record { return record{Roster: v} })},
		{'X', wrap(after.Revoked, func(v *projection.RevocationRecord) record { return record{Revoked: v} })},
	}
	for _, l := range lists {
		p, d, err := diffList(old[l.kind], l.next, now)
		if err != nil {
			return nil, nil, err
		}
		put, del = append(put, p...), append(del, d...)
	}
	return put, del, nil
}

func wrap[T any](list []T, as func(*T) record) []record {
	out := make([]record, len(list))
	for i := range list {
		v := list[i]
		out[i] = as(&v)
	}
	return out
}

// diffList aligns one list: old with seqs, next without.
func diffList(old, next []record, now time.Time) (put, del []record, err error) {
	if len(old)*len(next) > maxDiffCells {
		return nil, nil, invalid("a change touches a list of %d records, more than one change may align", max(len(old), len(next)))
	}
	a, b := encodeRecords(old), encodeRecords(next)
	lcs := commonRuns(a, b)
	// Walk the alignment gap by gap: between two kept records, the old
	// ones not kept pair up with the new ones in order (a change in place),
	// and what is left over is removed or added.
	var gapOld, gapNew []int
	lastSeq := int64(0)
	flush := func(nextSeq int64, hasNext bool) error {
		n := min(len(gapOld), len(gapNew))
		for k := range n {
			r := next[gapNew[k]]
			r.Seq = old[gapOld[k]].Seq
			put = append(put, r)
			// The old copies in partitions the changed record is no
			// longer in go; the storage lets a put win over a delete of
			// the same item.
			del = append(del, old[gapOld[k]])
		}
		for _, i := range gapOld[n:] {
			del = append(del, old[i])
		}
		added := gapNew[n:]
		lo := lastSeq
		if n > 0 {
			lo = old[gapOld[n-1]].Seq
		}
		for k, j := range added {
			r := next[j]
			switch {
			case !hasNext:
				r.Seq = max(freshSeq(now), lo+1)
			case nextSeq-lo > int64(len(added)):
				// Evenly into the gap below the next record.
				r.Seq = lo + (nextSeq-lo)*int64(k+1)/int64(len(added)+1)
			default:
				return conflict("no room to insert a record here; export and import the projection to renumber it")
			}
			lo = r.Seq
			put = append(put, r)
		}
		gapOld, gapNew = gapOld[:0], gapNew[:0]
		return nil
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			if err := flush(old[i].Seq, true); err != nil {
				return nil, nil, err
			}
			lastSeq = old[i].Seq
			i, j = i+1, j+1
		case j < len(b) && (i == len(a) || lcs[i][j+1] >= lcs[i+1][j]):
			gapNew = append(gapNew, j)
			j++
		default:
			gapOld = append(gapOld, i)
			i++
		}
	}
	if err := flush(0, false); err != nil {
		return nil, nil, err
	}
	return put, del, nil
}

// encodeRecords is each record's JSON, what the alignment compares.
func encodeRecords(rs []record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		b, _ := json.Marshal(r)
		out[i] = string(b)
	}
	return out
}

// commonRuns is the alignment's table: [i][j] is the longest common run
// of a[i:] and b[j:].
func commonRuns(a, b []string) [][]int {
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	return lcs
}
