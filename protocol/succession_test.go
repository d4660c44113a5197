package protocol

import (
	"slices"
	"testing"
)

// rotation is K1 -> K2 -> K3, the chain oldest first.
type rotation struct {
	k1, k2, k3 *Keys
	chain      []Succession
}

func newRotation(t *testing.T) rotation {
	t.Helper()
	r := rotation{k1: newTestKeys(t), k2: newTestKeys(t), k3: newTestKeys(t)}
	l1, err := SignSuccession(r.k1, r.k2.Public())
	if err != nil {
		t.Fatal(err)
	}
	l2, err := SignSuccession(r.k2, r.k3.Public())
	if err != nil {
		t.Fatal(err)
	}
	r.chain = []Succession{l1, l2}
	return r
}

func approvedSet(ids ...string) func(string) bool {
	return func(id string) bool { return slices.Contains(ids, id) }
}

func TestWalkSuccessionStopsAtTheFirstApprovedKey(t *testing.T) {
	r := newRotation(t)
	walk := WalkSuccession(r.k3.KeyID(), r.chain, approvedSet(r.k1.KeyID()))
	if walk.Failure != "" || walk.From != r.k1.KeyID() || !slices.Equal(walk.Path, []string{r.k1.KeyID(), r.k2.KeyID(), r.k3.KeyID()}) {
		t.Fatalf("from K1: %+v", walk)
	}
	walk = WalkSuccession(r.k3.KeyID(), r.chain, approvedSet(r.k1.KeyID(), r.k2.KeyID()))
	if walk.From != r.k2.KeyID() || !slices.Equal(walk.Path, []string{r.k2.KeyID(), r.k3.KeyID()}) {
		t.Fatalf("K2 is nearer: %+v", walk)
	}
}

func TestWalkSuccessionFailures(t *testing.T) {
	r := newRotation(t)
	other := newRotation(t)
	swapped := slices.Clone(r.chain)
	swapped[0].Identity.Encryption = other.k1.Public().Encryption

	tests := []struct {
		name     string
		current  string
		chain    []Succession
		approved func(string) bool
		want     SuccessionFailure
		wantPath int
	}{
		{"an empty chain", r.k3.KeyID(), nil, approvedSet(r.k1.KeyID()), SuccessionNoChain, 1},
		{"a chain longer than the bound", r.k3.KeyID(), make([]Succession, MaxSuccessionChain+1), approvedSet(), SuccessionTooLong, 1},
		{"a chain to no approved key", r.k3.KeyID(), r.chain, approvedSet(), SuccessionUnknownOrigin, 3},
		{"a link for another successor", r.k2.KeyID(), r.chain, approvedSet(r.k1.KeyID()), SuccessionBrokenLink, 1},
		{"another site's chain replayed", r.k3.KeyID(), other.chain, approvedSet(other.k1.KeyID()), SuccessionBrokenLink, 1},
		{"links out of order", r.k3.KeyID(), []Succession{r.chain[1], r.chain[0]}, approvedSet(r.k1.KeyID()), SuccessionBrokenLink, 1},
		{"a substituted encryption key in an older link", r.k3.KeyID(), swapped, approvedSet(r.k1.KeyID()), SuccessionBrokenLink, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			walk := WalkSuccession(tt.current, tt.chain, tt.approved)
			if walk.Failure != tt.want || walk.From != "" || len(walk.Path) != tt.wantPath || walk.Path[len(walk.Path)-1] != tt.current {
				t.Fatalf("got %+v, want %s with a path of %d", walk, tt.want, tt.wantPath)
			}
		})
	}
}

func TestWalkSuccessionAcceptsTheLongestAllowedChain(t *testing.T) {
	keys := []*Keys{newTestKeys(t)}
	var chain []Succession
	for range MaxSuccessionChain {
		next := newTestKeys(t)
		link, err := SignSuccession(keys[len(keys)-1], next.Public())
		if err != nil {
			t.Fatal(err)
		}
		chain = append(chain, link)
		keys = append(keys, next)
	}
	walk := WalkSuccession(keys[len(keys)-1].KeyID(), chain, approvedSet(keys[0].KeyID()))
	if walk.From != keys[0].KeyID() || len(walk.Path) != MaxSuccessionChain+1 {
		t.Fatalf("got from %q with %d steps (%s)", walk.From, len(walk.Path), walk.Failure)
	}
}

func TestVerifyLinkRefusesAnUnsignedEncryptionKey(t *testing.T) {
	r := newRotation(t)
	link := r.chain[0]
	if !VerifyLink(link, r.k2.KeyID()) {
		t.Fatal("genuine link refused")
	}
	link.Identity.EncryptionSig = r.k2.Public().EncryptionSig
	if VerifyLink(link, r.k2.KeyID()) {
		t.Fatal("a link whose predecessor identity does not verify was accepted")
	}
	if _, err := SignSuccession(r.k1, PublicIdentity{Identity: "bad"}); err == nil {
		t.Fatal("signed a succession to a malformed identity")
	}
}
