package store

import (
	"testing"
)

func TestRouteKeyJoinsWithNUL(t *testing.T) {
	if got := (Route{SiteID: "s", Owner: "o"}).Key(); got != "s\x00o" {
		t.Fatalf("route key = %q", got)
	}
}

func TestSweepResultListsRequeuedBeforeRemoved(t *testing.T) {
	r := SweepResult{Requeued: []Job{{ID: "a"}}, Removed: []Job{{ID: "b"}, {ID: "c"}}}
	var got []string
	for _, j := range r.All() {
		got = append(got, j.ID)
	}
	if len(got) != 3 || got[0] != "a" || got[1] != "b" || got[2] != "c" {
		t.Fatalf("all = %v", got)
	}
}

// The rotation holds for ResultsRotateMs after a move, and a move time
// that far ahead of this clock (another replica's, running fast) does not
// hold it.
func TestResultsRotationMovesAfterItsBound(t *testing.T) {
	const at = 1_000_000
	for _, c := range []struct {
		now   int64
		moves bool
	}{
		{at, false},
		{at + ResultsRotateMs - 1, false},
		{at + ResultsRotateMs, true},
		{at - ResultsRotateMs + 1, false},
		{at - ResultsRotateMs, true},
	} {
		if got := ResultsRotationMoves(at, c.now); got != c.moves {
			t.Errorf("moved at %d, at %d: moves %v, want %v", int64(at), c.now, got, c.moves)
		}
	}
}
