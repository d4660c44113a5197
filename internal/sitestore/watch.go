package sitestore

import "sync"

// Watchers is the push seam's bookkeeping, shared by implementations: a set
// of callbacks per job, so an unsubscribe removes exactly the one it
// registered (two waiters on one job are ordinary). The zero value is
// ready.
type Watchers struct {
	mu   sync.Mutex
	next int
	byID map[string]map[int]func()
}

// Subscribe registers onChange for jobID. The returned function is
// idempotent.
func (w *Watchers) Subscribe(jobID string, onChange func()) func() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byID == nil {
		w.byID = map[string]map[int]func(){}
	}
	if w.byID[jobID] == nil {
		w.byID[jobID] = map[int]func(){}
	}
	w.next++
	key := w.next
	w.byID[jobID][key] = onChange
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			delete(w.byID[jobID], key)
			if len(w.byID[jobID]) == 0 {
				delete(w.byID, jobID)
			}
		})
	}
}

// Notify calls every watcher of jobID, outside the lock. A panicking
// watcher is recovered: it is a signal handler, and it must not take out
// the write that notified it.
func (w *Watchers) Notify(jobID string) {
	w.mu.Lock()
	var fns []func()
	for _, f := range w.byID[jobID] {
		fns = append(fns, f)
	}
	w.mu.Unlock()
	for _, f := range fns {
		func() {
			defer func() { _ = recover() }()
			f()
		}()
	}
}

// NotifyAll calls every watcher of every job: what a push seam that may
// have missed writes (a restarted stream reader) does so that every waiter
// re-reads.
func (w *Watchers) NotifyAll() {
	w.mu.Lock()
	ids := make([]string, 0, len(w.byID))
	for id := range w.byID {
		ids = append(ids, id)
	}
	w.mu.Unlock()
	for _, id := range ids {
		w.Notify(id)
	}
}
