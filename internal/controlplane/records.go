package controlplane

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
)

// record is one projection record as stored: exactly one of the kinds,
// and its seq, the record's place in registry order.
//
// Every rule of the projection that depends on order ("the first record
// that matches") compares records that share a partition (records.go's
// partitions), and a partition keeps its records sorted by seq, so seq
// order is registry order where it decides anything. Across partitions seq
// only orders the lists a scope is assembled into.
type record struct {
	Seq     int64                        `json:"-"`
	Site    *projection.SiteRecord       `json:"site,omitempty"`
	Device  *projection.DeviceRecord     `json:"device,omitempty"`
	Consent *projection.ConsentRecord    `json:"consent,omitempty"`
	Revoked *projection.RevocationRecord `json:"revoked,omitempty"`
	Roster  *projection.RosterRecord     `json:"roster,omitempty"`
}

// The partitions a record is stored in, one item in each, named by a
// prefix no routing key uses (store/dynamo/keys.go). The first of a
// record's partitions is its home; the others are copies kept so that a
// request can find the record by what it knows:
//
//	VS#<siteId>     a site, by id
//	VSK#<keyId>     a site again, by its current key id (registration and
//	                rotation refuse a key another site holds)
//	VD#<runnerId>   a device, by runner id (every daemon request)
//	VI#<identity>   a device again, by its identity key (pairing)
//	VO#<owner>      an owner's consents (their mappings inside), revocations
//	                and the rosters they own: what decides every route of
//	                the owner's devices
//	VR#<rosterId>   a roster again, by id (roster changes)
//	VOD#<owner>     a device again, by its owner: the devices whose presence
//	                says whether a service mapped to that owner is advertised
//	                (the enqueue's satisfiable question, the console). No
//	                daemon request reads it.
//
// A site's home is not what requests read. Beside it, in partitions of
// their own, are its read copies (copies.go), one item each, written from
// the home after every change of the site and by an import, never a
// record's partition:
//
//	VSC#<siteId>\x00<k>  copy k (0 to the table's site copies, less one) of
//	                     VS#<siteId>: what a request reads the site from
const (
	prefixSite     = "VS#"
	prefixSiteKey  = "VSK#"
	prefixDevice   = "VD#"
	prefixIdentity = "VI#"
	prefixOwner    = "VO#"
	prefixRoster   = "VR#"
	prefixDevices  = "VOD#"
	prefixSiteCopy = "VSC#"
)

func siteKey(siteID string) string        { return prefixSite + siteID }
func siteKeyKey(keyID string) string      { return prefixSiteKey + keyID }
func deviceKey(runnerID string) string    { return prefixDevice + runnerID }
func identityKey(identity string) string  { return prefixIdentity + identity }
func ownerKey(owner string) string        { return prefixOwner + owner }
func rosterKey(id string) string          { return prefixRoster + id }
func ownerDevicesKey(owner string) string { return prefixDevices + owner }

// partitions are the partitions r is stored in, home first.
func (r record) partitions() []string {
	switch {
	case r.Site != nil:
		out := []string{siteKey(r.Site.SiteID)}
		// An identity that is not a key has no key id and matches nothing.
		if id, err := protocol.KeyID(r.Site.Site.Identity); err == nil {
			out = append(out, siteKeyKey(id))
		}
		return out
	case r.Device != nil:
		return []string{deviceKey(r.Device.RunnerID), identityKey(r.Device.Device.Identity), ownerDevicesKey(r.Device.Owner)}
	case r.Consent != nil:
		return []string{ownerKey(r.Consent.Owner)}
	case r.Revoked != nil:
		return []string{ownerKey(r.Revoked.Owner)}
	case r.Roster != nil:
		return []string{rosterKey(r.Roster.ID), ownerKey(r.Roster.Owner)}
	}
	return nil
}

// listed is the partition an export reads r from: the one whose order
// decides the most. A device is listed from its identity partition, where
// the pairing poll's "first record with this key" is decided (a re-approved
// key's new record before its revoked one); a roster from its owner's,
// where the owner's rosters keep their order.
func (r record) listed() string {
	p := r.partitions()
	switch {
	case r.Device != nil, r.Roster != nil:
		return p[1]
	}
	return p[0]
}

// kind is a record's sort-key letter: records of one partition sort by
// kind, then seq.
func (r record) kind() byte {
	switch {
	case r.Site != nil:
		return 'S'
	case r.Device != nil:
		return 'D'
	case r.Consent != nil:
		return 'C'
	case r.Revoked != nil:
		return 'X'
	}
	return 'R'
}

// sortKey is r's item key within each of its partitions.
func (r record) sortKey() string { return fmt.Sprintf("%c#%020d", r.kind(), r.Seq) }

// id names r across partitions: its kind and seq.
type recordID struct {
	kind byte
	seq  int64
}

func (r record) id() recordID { return recordID{r.kind(), r.Seq} }

// maxRecordBytes keeps a record's item (its JSON, keys and names) under
// DynamoDB's 400 KB item limit.
const maxRecordBytes = 350_000

// encode is r as stored, refused with ErrTooLarge past maxRecordBytes.
func (r record) encode() ([]byte, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if len(data) > maxRecordBytes {
		return nil, ErrTooLarge
	}
	return data, nil
}

// checkSizes refuses, before anything is written, a record too large to
// store.
func checkSizes(recs []record) error {
	for _, r := range recs {
		if _, err := r.encode(); err != nil {
			return err
		}
	}
	return nil
}

func decodeRecord(seq int64, data []byte) (record, error) {
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return record{}, fmt.Errorf("stored projection record %d: %w", seq, err)
	}
	r.Seq = seq
	if len(r.partitions()) == 0 {
		return record{}, fmt.Errorf("stored projection record %d holds no record", seq)
	}
	return r, nil
}

// records are the records of f, seq from base in steps of importSpacing
// within each list, so a record re-imported at the same place lands on the
// same item, and there is room before each record for one inserted later.
func records(f projection.Fixture, at listOffsets) []record {
	var out []record
	seq := func(list, i int) int64 { return importBase + int64(list)*listSpan + int64(i)*importSpacing }
	for i := range f.Sites {
		out = append(out, record{Seq: seq(0, at.Sites+i), Site: &f.Sites[i]})
	}
	for i := range f.Consents {
		out = append(out, record{Seq: seq(1, at.Consents+i), Consent: &f.Consents[i]})
	}
	for i := range f.Devices {
		out = append(out, record{Seq: seq(2, at.Devices+i), Device: &f.Devices[i]})
	}
	for i := range f.Rosters {
		out = append(out, record{Seq: seq(3, at.Rosters+i), Roster: &f.Rosters[i]})
	}
	for i := range f.Revoked {
		out = append(out, record{Seq: seq(4, at.Revoked+i), Revoked: &f.Revoked[i]})
	}
	return out
}

// listOffsets is where a page of an import starts in each of the fixture's
// lists.
type listOffsets struct {
	Sites    int `json:"sites"`
	Consents int `json:"consents"`
	Devices  int `json:"devices"`
	Rosters  int `json:"rosters"`
	Revoked  int `json:"revoked"`
}

// Seqs. An import numbers each list from importBase, importSpacing apart,
// each list in its own span; a record added later is stamped from the
// clock (freshSeq), far above every import's, so it sorts after them;
// one inserted before another takes the gap below it.
const (
	importBase    = 1_000_000_000_000_000_000
	importSpacing = 1_000
	listSpan      = 100_000_000_000_000
	// MaxImportRecords bounds each list of an import, so its seqs stay
	// inside its span.
	MaxImportRecords = listSpan / importSpacing
)

// freshSeq is a seq for a record added now: microseconds since the epoch
// times a thousand, plus random low digits so two admins adding at once
// do not collide. Far above every import seq until the year 2262.
func freshSeq(now time.Time) int64 {
	var b [8]byte
	rand.Read(b[:])
	return now.UnixMicro()*1000 + int64(binary.BigEndian.Uint64(b[:])%1000)
}

// fixtureOf assembles records into a fixture in seq order, each record
// once however many of its partitions were read.
func fixtureOf(recs []record) projection.Fixture {
	seen := map[recordID]bool{}
	var unique []record
	for _, r := range recs {
		if !seen[r.id()] {
			seen[r.id()] = true
			unique = append(unique, r)
		}
	}
	slices.SortStableFunc(unique, func(a, b record) int { return cmp.Compare(a.Seq, b.Seq) })
	f := projection.EmptyFixture()
	for _, r := range unique {
		switch {
		case r.Site != nil:
			f.Sites = append(f.Sites, *r.Site)
		case r.Device != nil:
			f.Devices = append(f.Devices, *r.Device)
		case r.Consent != nil:
			f.Consents = append(f.Consents, *r.Consent)
		case r.Revoked != nil:
			f.Revoked = append(f.Revoked, *r.Revoked)
		case r.Roster != nil:
			f.Rosters = append(f.Rosters, *r.Roster)
		}
	}
	return f
}
