package controlplane

import (
	"context"
	"slices"
	"strconv"
	"sync"
)

// MemoryStorage is Storage in one process's memory, for tests and the local
// stack. Several Stores over one MemoryStorage behave as several instances
// over one table.
type MemoryStorage struct {
	mu    sync.Mutex
	parts map[string]*memoryPartition
}

type memoryPartition struct {
	version int64
	// versionGen is the import that last wrote the version, "" for a
	// change: an import's sweep drops a version no write of it made.
	versionGen string
	items      map[string]memoryItem
}

type memoryItem struct {
	rec record
	gen string
}

// NewMemoryStorage returns an empty storage: the empty fixture.
func NewMemoryStorage() *MemoryStorage {
	return &MemoryStorage{parts: map[string]*memoryPartition{}}
}

func (m *MemoryStorage) part(key string) *memoryPartition {
	p := m.parts[key]
	if p == nil {
		p = &memoryPartition{items: map[string]memoryItem{}}
		m.parts[key] = p
	}
	return p
}

// Read is the named partitions.
func (m *MemoryStorage) Read(ctx context.Context, keys []string) (map[string]partition, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]partition{}
	for _, k := range keys {
		p := m.parts[k]
		if p == nil {
			out[k] = partition{}
			continue
		}
		sks := make([]string, 0, len(p.items))
		for sk := range p.items {
			sks = append(sks, sk)
		}
		slices.Sort(sks)
		got := partition{version: p.version}
		for _, sk := range sks {
			got.records = append(got.records, p.items[sk].rec)
		}
		out[k] = got
	}
	return out, nil
}

// Commit applies c if every partition it read is unchanged.
func (m *MemoryStorage) Commit(ctx context.Context, c commit) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, v := range c.read {
		current := int64(0)
		if p := m.parts[k]; p != nil {
			current = p.version
		}
		if current != v {
			return ErrVersionConflict
		}
	}
	touched := map[string]bool{}
	for _, r := range c.del {
		for _, k := range r.partitions() {
			if p := m.parts[k]; p != nil {
				delete(p.items, r.sortKey())
			}
			touched[k] = true
		}
	}
	for _, r := range c.put {
		for _, k := range r.partitions() {
			m.part(k).items[r.sortKey()] = memoryItem{rec: r}
			touched[k] = true
		}
	}
	for k := range touched {
		p := m.part(k)
		p.version++
		p.versionGen = ""
	}
	return nil
}

// siteCopies is 0: one process's memory has no partition to spread, so
// every request reads a site at its home.
func (m *MemoryStorage) siteCopies() int { return 0 }

// fanOut has no copies to write.
func (m *MemoryStorage) fanOut(context.Context, string) error { return nil }

// PutRecords writes recs as part of import gen.
func (m *MemoryStorage) PutRecords(ctx context.Context, gen string, recs []record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range recs {
		for _, k := range r.partitions() {
			m.part(k).items[r.sortKey()] = memoryItem{rec: r, gen: gen}
		}
	}
	return nil
}

// SweepStale removes, all in one page, what import gen did not write.
func (m *MemoryStorage) SweepStale(ctx context.Context, gen, cursor string) (int, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	removed := 0
	for k, p := range m.parts {
		for sk, it := range p.items {
			if it.gen != gen {
				delete(p.items, sk)
				removed++
			}
		}
		if p.versionGen != gen {
			// Dropping the version makes a change that read the partition
			// before the import lose its race, as on DynamoDB.
			p.version, p.versionGen = 0, gen
		}
		if len(p.items) == 0 {
			delete(m.parts, k)
		}
	}
	return removed, "", nil
}

// listPage bounds a page of List, so the memory storage pages as the
// DynamoDB one does and a caller's paging is exercised by every test.
const listPage = 500

// List is one page of every record, from the partition each is listed in.
func (m *MemoryStorage) List(ctx context.Context, cursor string) ([]record, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	start := 0
	if cursor != "" {
		n, err := strconv.Atoi(cursor)
		if err != nil || n < 0 {
			return nil, "", invalid("cursor %q is not one this store gave", cursor)
		}
		start = n
	}
	type listed struct {
		key, sk string
		rec     record
	}
	var all []listed
	for k, p := range m.parts {
		for sk, it := range p.items {
			if it.rec.listed() == k {
				all = append(all, listed{k, sk, it.rec})
			}
		}
	}
	slices.SortFunc(all, func(a, b listed) int {
		if a.key != b.key {
			if a.key < b.key {
				return -1
			}
			return 1
		}
		if a.sk < b.sk {
			return -1
		}
		if a.sk > b.sk {
			return 1
		}
		return 0
	})
	if start > len(all) {
		start = len(all)
	}
	end := min(start+listPage, len(all))
	var out []record
	for _, l := range all[start:end] {
		out = append(out, l.rec)
	}
	next := ""
	if end < len(all) {
		next = strconv.Itoa(end)
	}
	return out, next, nil
}
