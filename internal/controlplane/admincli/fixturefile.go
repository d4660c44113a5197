package admincli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/projection"
)

// A fixture file is read as a stream, record by record, so a file of a
// million devices costs a page of memory, not the file: the whole file is
// checked first (syntax, schema, every identity's signature), and only then
// sent, page by page, and the import finished. A file that fails the check
// changes nothing.

// pageRecords and pageBytes bound one page sent: well inside the API's
// MaxImportPageRecords and a Lambda's 6 MB request. A page also ends at
// the API's MaxImportPageSites sites.
const (
	pageRecords = 2_000
	pageBytes   = 3 << 20
)

// fixtureLists are a RelayFixture's lists, in the order an export writes
// them.
var fixtureLists = []string{"sites", "consents", "devices", "rosters", "revoked"}

// readFixturePages reads a RelayFixture from r and hands it to page in
// pages: each page's records and where they start in each list. It refuses
// what projection.Parse refuses: unknown or repeated keys, a null, a
// record with an unknown field, and a fixture without consents.
func readFixturePages(r io.Reader, page func(at controlplane.ListOffsets, f projection.Fixture) error) error {
	dec := json.NewDecoder(bufio.NewReaderSize(r, 1<<20))
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	var at controlplane.ListOffsets
	current := projection.EmptyFixture()
	n, size := 0, 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		if err := page(at, current); err != nil {
			return err
		}
		at.Sites += len(current.Sites)
		at.Consents += len(current.Consents)
		at.Devices += len(current.Devices)
		at.Rosters += len(current.Rosters)
		at.Revoked += len(current.Revoked)
		current, n, size = projection.EmptyFixture(), 0, 0
		return nil
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		known := false
		for _, l := range fixtureLists {
			known = known || l == key
		}
		if !known {
			return fmt.Errorf("%s: unknown key", key)
		}
		if seen[key] {
			return fmt.Errorf("%s: repeated", key)
		}
		seen[key] = true
		if err := expectDelim(dec, '['); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		for i := 0; dec.More(); i++ {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return fmt.Errorf("%s[%d]: %w", key, i, err)
			}
			if err := addRecord(&current, key, raw); err != nil {
				// Judged as the one record of a fixture: its place there is
				// [0], its place in the file is [i].
				return errors.New(strings.Replace(err.Error(), key+"[0]", fmt.Sprintf("%s[%d]", key, i), 1))
			}
			n++
			size += len(raw)
			if n >= pageRecords || size >= pageBytes || len(current.Sites) >= controlplane.MaxImportPageSites {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := expectDelim(dec, ']'); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the fixture")
	}
	if !seen["consents"] {
		return errors.New("consents: required")
	}
	return flush()
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("expected %q, found %v", want, tok)
	}
	return nil
}

// addRecord decodes one record as strictly as the API does (as a fixture
// holding it alone, so projection.Parse judges it) and appends it to its
// list in f.
func addRecord(f *projection.Fixture, list string, raw json.RawMessage) error {
	var doc []byte
	if list == "consents" {
		doc = slices.Concat([]byte(`{"consents":[`), raw, []byte(`]}`))
	} else {
		doc = slices.Concat([]byte(`{"consents":[],"`+list+`":[`), raw, []byte(`]}`))
	}
	one, err := projection.Parse(doc)
	if err != nil {
		return err
	}
	f.Sites = append(f.Sites, one.Sites...)
	f.Consents = append(f.Consents, one.Consents...)
	f.Devices = append(f.Devices, one.Devices...)
	f.Rosters = append(f.Rosters, one.Rosters...)
	f.Revoked = append(f.Revoked, one.Revoked...)
	return nil
}

// importFile is `byorelay admin import FILE`.
func importFile(path string) command {
	return func(ctx context.Context, c *controlplane.Client, p *printer) error {
		file, size, cleanup, err := openFixture(path)
		if err != nil {
			return err
		}
		defer cleanup()
		started := time.Now()
		total, err := checkFixtureFile(file)
		if err != nil {
			return fmt.Errorf("%s: %w (nothing was written)", path, err)
		}
		fmt.Fprintf(p.progress, "import: %s holds %d records (%d bytes); checked, sending\n", path, total, size)
		if _, err := file.Seek(0, io.SeekStart); err != nil {
			return err
		}
		// A projection that holds nothing needs no sweep after the import:
		// the sweep reads the whole table, which at millions of items is
		// the slowest part of an import.
		empty, err := projectionEmpty(ctx, c)
		if err != nil {
			return err
		}
		id := controlplane.NewImportID()
		sent, err := sendFixturePages(ctx, c, p, file, id, total, started)
		if err != nil {
			return fmt.Errorf("%s: %w\nimport %s stopped after %d of %d records: the projection now holds those records beside the ones it held before, "+
				"and nothing was removed; run the same import again to complete it", path, err, id, sent, total)
		}
		res := controlplane.ImportFinishResponse{Version: time.Now().UnixMilli()}
		removed := 0
		if empty {
			fmt.Fprintf(p.progress, "import: the projection held no record before this import, so none is left to remove\n")
		} else {
			fmt.Fprintf(p.progress, "import: removing the records %s does not name\n", path)
			if res, removed, err = finishImport(ctx, c, p, id, started); err != nil {
				return fmt.Errorf("finishing import %s: %w\nevery record of %s is written; records it does not name may remain: run the same import again to remove them", id, err, path)
			}
		}
		answer := controlplane.ImportResult{Version: res.Version, Written: sent, Removed: removed}
		p.raw, _ = json.Marshal(answer)
		return p.show(func(w io.Writer) error {
			_, err := fmt.Fprintf(w, "imported %s: the projection is replaced: %d records written, %d stored items removed, in %s; projection version %d\n",
				path, sent, removed, time.Since(started).Round(time.Millisecond), res.Version)
			return err
		})
	}
}

// checkFixtureFile checks the whole file, page by page, before anything is
// written, and counts its records.
func checkFixtureFile(file io.Reader) (int, error) {
	total := 0
	err := readFixturePages(file, func(at controlplane.ListOffsets, f projection.Fixture) error {
		if err := controlplane.CheckFixture(f); err != nil {
			return fmt.Errorf("at sites %d, consents %d, devices %d, rosters %d, revoked %d: %w", at.Sites, at.Consents, at.Devices, at.Rosters, at.Revoked, err)
		}
		total += records(f)
		return nil
	})
	return total, err
}

// sendFixturePages sends the file's pages as import id, reporting
// progress, and returns how many records were written.
func sendFixturePages(ctx context.Context, c *controlplane.Client, p *printer, file io.Reader, id string, total int, started time.Time) (int, error) {
	sent := 0
	lastReport := time.Now()
	err := readFixturePages(file, func(at controlplane.ListOffsets, f projection.Fixture) error {
		res, err := c.ImportPage(ctx, controlplane.ImportPageRequest{Import: id, At: at, Fixture: f})
		if err != nil {
			return err
		}
		sent += res.Written
		if time.Since(lastReport) > 2*time.Second || sent == total {
			lastReport = time.Now()
			fmt.Fprintf(p.progress, "import: %d of %d records written (%.0f%%), %s\n", sent, total, 100*float64(sent)/float64(max(total, 1)), time.Since(started).Round(time.Second))
		}
		return nil
	})
	return sent, err
}

// finishImport removes, page by page, the stored records import id did
// not write, reporting progress.
func finishImport(ctx context.Context, c *controlplane.Client, p *printer, id string, started time.Time) (controlplane.ImportFinishResponse, int, error) {
	removed, steps := 0, 0
	lastReport := time.Now()
	for cursor := ""; ; {
		res, err := c.FinishImport(ctx, controlplane.ImportFinishRequest{Import: id, Cursor: cursor})
		if err != nil {
			return res, removed, err
		}
		removed += res.Removed
		if res.Next == "" {
			return res, removed, nil
		}
		cursor = res.Next
		steps++
		if time.Since(lastReport) > 5*time.Second {
			lastReport = time.Now()
			fmt.Fprintf(p.progress, "import: %d pages of the table read, %d stale items removed, %s\n", steps, removed, time.Since(started).Round(time.Second))
		}
	}
}

// projectionEmpty says whether the projection holds no record, reading
// pages only until it finds one.
func projectionEmpty(ctx context.Context, c *controlplane.Client) (bool, error) {
	for cursor := ""; ; {
		page, err := c.ExportPage(ctx, cursor)
		if err != nil {
			return false, err
		}
		if records(page.Fixture) > 0 {
			return false, nil
		}
		if page.Next == "" {
			return true, nil
		}
		cursor = page.Next
	}
}

func records(f projection.Fixture) int {
	return len(f.Sites) + len(f.Consents) + len(f.Devices) + len(f.Rosters) + len(f.Revoked)
}

// openFixture opens path for two reads; stdin is spooled to a temporary
// file first, as it can be read only once.
func openFixture(path string) (io.ReadSeeker, int64, func(), error) {
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, 0, nil, err
		}
		info, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, 0, nil, err
		}
		return f, info.Size(), func() { f.Close() }, nil
	}
	tmp, err := os.CreateTemp("", "byorelay-import-*.json")
	if err != nil {
		return nil, 0, nil, err
	}
	cleanup := func() { tmp.Close(); os.Remove(tmp.Name()) }
	n, err := io.Copy(tmp, os.Stdin)
	if err == nil {
		_, err = tmp.Seek(0, io.SeekStart)
	}
	if err != nil {
		cleanup()
		return nil, 0, nil, err
	}
	return tmp, n, cleanup, nil
}

// exportAll is `byorelay admin export`: every page, written as one
// RelayFixture to p's writer. Each list is spooled to its own temporary
// file while the pages arrive (a page holds records of every list), so the
// export costs a page of memory however large the projection.
func exportAll(ctx context.Context, c *controlplane.Client, p *printer) error {
	spools := map[string]*spool{}
	for _, l := range fixtureLists {
		s, err := newSpool()
		if err != nil {
			return err
		}
		defer s.close()
		spools[l] = s
	}
	pages := 0
	for cursor := ""; ; {
		res, err := c.ExportPage(ctx, cursor)
		if err != nil {
			return err
		}
		f := res.Fixture
		for _, add := range []struct {
			list string
			add  func(s *spool) error
		}{
			{"sites", func(s *spool) error { return s.addAll(f.Sites) }},
			{"consents", func(s *spool) error { return s.addAll(f.Consents) }},
			{"devices", func(s *spool) error { return s.addAll(f.Devices) }},
			{"rosters", func(s *spool) error { return s.addAll(f.Rosters) }},
			{"revoked", func(s *spool) error { return s.addAll(f.Revoked) }},
		} {
			if err := add.add(spools[add.list]); err != nil {
				return err
			}
		}
		pages++
		if res.Next == "" {
			break
		}
		cursor = res.Next
	}
	w := bufio.NewWriter(p.w)
	w.WriteString("{")
	for i, l := range fixtureLists {
		if i > 0 {
			w.WriteString(",")
		}
		fmt.Fprintf(w, "\n  %q: [", l)
		if err := spools[l].copyTo(w); err != nil {
			return err
		}
		w.WriteString("]")
	}
	w.WriteString("\n}\n")
	return w.Flush()
}

// spool is one list of an export on its way to the output: its records as
// JSON, comma separated, in a temporary file.
type spool struct {
	file *os.File
	buf  *bufio.Writer
	n    int
}

func newSpool() (*spool, error) {
	f, err := os.CreateTemp("", "byorelay-export-*.json")
	if err != nil {
		return nil, err
	}
	return &spool{file: f, buf: bufio.NewWriter(f)}, nil
}

func (s *spool) addAll(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	inner := bytes.TrimSuffix(bytes.TrimPrefix(data, []byte("[")), []byte("]"))
	if len(inner) == 0 {
		return nil
	}
	// Each record on its own line within the list.
	var list []json.RawMessage
	if err := json.Unmarshal(data, &list); err != nil {
		return err
	}
	for _, r := range list {
		if s.n > 0 {
			s.buf.WriteString(",")
		}
		s.buf.WriteString("\n    ")
		s.buf.Write(r)
		s.n++
	}
	return nil
}

func (s *spool) copyTo(w io.Writer) error {
	if err := s.buf.Flush(); err != nil {
		return err
	}
	if _, err := s.file.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if _, err := io.Copy(w, s.file); err != nil {
		return err
	}
	if s.n > 0 {
		_, err := io.WriteString(w, "\n  ")
		return err
	}
	return nil
}

func (s *spool) close() { s.file.Close(); os.Remove(s.file.Name()) }
