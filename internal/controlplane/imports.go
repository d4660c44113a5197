package controlplane

import (
	"context"
	"net/http"
	"strings"

	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// An import replaces the whole projection, in three steps an operator can
// follow and re-run:
//
//  1. ImportPage, as often as the fixture needs: each page's records are
//     written under the import's id, each at a place fixed by its index in
//     its list (ImportPageRequest.At), so a page sent twice writes the same
//     items twice.
//  2. FinishImport, page by page until it answers no cursor: every record
//     no page of this import wrote is removed, and every partition's
//     version with it.
//  3. Nothing: the projection is then the fixture's, exactly.
//
// Records the new fixture does not name are removed in step 2, not before:
// until it ends, a request may be decided by an old record beside the new
// ones (a device the new fixture drops can still claim). An import cut off
// part way leaves exactly that mix; running the same import again, from the
// start with a new id, completes it. Admin changes made while an import
// runs may be lost to it: the import is a replacement, and wins.

// MaxImportPageRecords bounds one page of an import, so a page's writes
// and its request stay well inside a Lambda's time and 6 MB body.
const MaxImportPageRecords = 5_000

// MaxImportPageSites bounds the sites of one page: each site also writes
// its read copies (DefaultSiteCopies, at most MaxSiteCopies), so 16 sites
// are at most 16,384 writes, and 4,096 at the default, well inside a
// Lambda's time.
const MaxImportPageSites = 16

// MaxWholeExportRecords bounds GET /admin/fixture, whose answer is one
// document: past it, the answer would pass a Lambda's 6 MB response, and
// the export is paged (ExportPage) instead.
const MaxWholeExportRecords = 10_000

// maxImportIDBytes bounds an import's id; NewImportID's are 40.
const maxImportIDBytes = 64

var tooLargeToExport = &Error{Status: http.StatusRequestEntityTooLarge, Code: "too-large",
	Message: "the projection is too large to export in one answer; page through GET /admin/fixture/pages (byorelay admin export does)"}

// ImportPageRequest is POST /admin/fixture/import: one page of a fixture.
type ImportPageRequest struct {
	// Import names the import every page of it carries (NewImportID).
	Import string `json:"import"`
	// At is the index, in each of the fixture's lists, of the page's first
	// record of that list.
	At ListOffsets `json:"at" wire:"default"`
	// Fixture holds the page's records: a part of each list.
	Fixture projection.Fixture `json:"fixture"`
}

// ListOffsets is where a page starts in each of a fixture's lists.
type ListOffsets = listOffsets

// ImportPageResponse answers a page.
type ImportPageResponse struct {
	// Written is how many records the page wrote.
	Written int `json:"written"`
}

// ImportFinishRequest is POST /admin/fixture/import/finish: one step of
// removing what the import did not write.
type ImportFinishRequest struct {
	Import string `json:"import"`
	// Cursor is the previous step's Next; absent on the first.
	Cursor string `json:"cursor,omitempty"`
}

// ImportFinishResponse answers a step.
type ImportFinishResponse struct {
	// Removed is how many stored items this step removed.
	Removed int `json:"removed"`
	// Next is the cursor of the next step; absent when the import is done.
	Next string `json:"next,omitempty"`
	// Version stamps the finished import, once done (epoch ms).
	Version int64 `json:"version,omitempty"`
}

// ImportResult is what a whole import did.
type ImportResult struct {
	Version int64 `json:"version"`
	Written int   `json:"written"`
	Removed int   `json:"removed"`
}

// ExportPageResponse is GET /admin/fixture/pages: one page of the stored
// records, as a part of each list.
type ExportPageResponse struct {
	Fixture projection.Fixture `json:"fixture"`
	// Next is the cursor of the next page; absent after the last.
	Next string `json:"next,omitempty"`
}

// NewImportID is a fresh import id.
func NewImportID() string { return "import_" + store.NewLeaseID() }

// Validate implements protocol.Validator.
func (r ImportPageRequest) Validate() error {
	if err := checkImportID(r.Import); err != nil {
		return err
	}
	return nil
}

// Validate implements protocol.Validator.
func (r ImportFinishRequest) Validate() error { return checkImportID(r.Import) }

func checkImportID(id string) error {
	if id == "" || len(id) > maxImportIDBytes || strings.ContainsAny(id, " \t\r\n") {
		return &protocol.DecodeError{Path: "import", Problem: "must be an import id (1 to 64 bytes, no white space)"}
	}
	return nil
}

// ImportPage writes one page of import req.Import, checked as a whole
// import is (Import) before anything is written.
func (a *Admin) ImportPage(ctx context.Context, req ImportPageRequest) (ImportPageResponse, error) {
	f := req.Fixture
	if n := len(f.Sites) + len(f.Consents) + len(f.Devices) + len(f.Rosters) + len(f.Revoked); n > MaxImportPageRecords {
		return ImportPageResponse{}, invalid("a page holds %d records, more than %d", n, MaxImportPageRecords)
	}
	if len(f.Sites) > MaxImportPageSites {
		return ImportPageResponse{}, invalid("a page holds %d sites, more than %d (each writes its read copies too)", len(f.Sites), MaxImportPageSites)
	}
	return a.importPage(ctx, req)
}

// importPage is ImportPage of any size.
func (a *Admin) importPage(ctx context.Context, req ImportPageRequest) (ImportPageResponse, error) {
	if err := req.Validate(); err != nil {
		return ImportPageResponse{}, invalid("%v", err)
	}
	f := req.Fixture
	at := req.At
	for _, n := range []int{at.Sites + len(f.Sites), at.Consents + len(f.Consents), at.Devices + len(f.Devices), at.Rosters + len(f.Rosters), at.Revoked + len(f.Revoked)} {
		if n > MaxImportRecords || min(at.Sites, at.Consents, at.Devices, at.Rosters, at.Revoked) < 0 {
			return ImportPageResponse{}, invalid("a list of an import holds at most %d records", MaxImportRecords)
		}
	}
	if err := CheckFixture(f); err != nil {
		return ImportPageResponse{}, err
	}
	recs := records(f, at)
	if err := checkSizes(recs); err != nil {
		return ImportPageResponse{}, err
	}
	// A whole import in one page is written in pages all the same, so one
	// call never holds more writes in flight than a page's.
	for start := 0; start < len(recs); start += MaxImportPageRecords {
		if err := a.store.storage.PutRecords(ctx, req.Import, recs[start:min(start+MaxImportPageRecords, len(recs))]); err != nil {
			return ImportPageResponse{}, err
		}
	}
	return ImportPageResponse{Written: len(recs)}, nil
}

// FinishImport runs one step of removing what import req.Import did not
// write.
func (a *Admin) FinishImport(ctx context.Context, req ImportFinishRequest) (ImportFinishResponse, error) {
	if err := req.Validate(); err != nil {
		return ImportFinishResponse{}, invalid("%v", err)
	}
	removed, next, err := a.store.storage.SweepStale(ctx, req.Import, req.Cursor)
	if err != nil {
		return ImportFinishResponse{}, err
	}
	out := ImportFinishResponse{Removed: removed, Next: next}
	if next == "" {
		out.Version = a.store.now().UnixMilli()
		a.log.InfoContext(ctx, "projection import finished", "import", req.Import, "version", out.Version)
	}
	return out, nil
}

// ExportPage is one page of the stored projection. Within a partition the
// records keep their order, which is every order the projection's rules
// depend on (records.go); the lists across partitions are in the table's
// order.
func (a *Admin) ExportPage(ctx context.Context, cursor string) (ExportPageResponse, error) {
	recs, next, err := a.store.storage.List(ctx, cursor)
	if err != nil {
		return ExportPageResponse{}, err
	}
	return ExportPageResponse{Fixture: fixtureOf(recs), Next: next}, nil
}

// CheckFixture is every check an import makes of f before it writes
// anything, for a caller that pages a fixture and wants it judged whole
// before the first page is sent.
func CheckFixture(f projection.Fixture) error {
	if _, err := projection.New(f); err != nil {
		return invalid("%v", err)
	}
	return checkIdentities(f)
}
