package seal

import (
	"encoding/json"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/byorelay/byorelay/internal/stream"
	"github.com/byorelay/byorelay/protocol"
)

type pair struct {
	device, site *protocol.Keys
}

func newPair(t testing.TB) pair {
	t.Helper()
	d, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	s, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	return pair{d, s}
}

func (p pair) ctx(job, lease string) Context {
	return Context{JobID: job, LeaseID: lease, DeviceKeyID: p.device.KeyID(), SiteKeyID: p.site.KeyID()}
}

func (p pair) keys(t testing.TB, ctx Context) (daemon, site Key) {
	t.Helper()
	d, err := DeviceKey(p.device, p.site.Public(), ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := SiteKey(p.site, p.device.Public(), ctx)
	if err != nil {
		t.Fatal(err)
	}
	return d, s
}

// produce seals chunks and an end, as a daemon does, and returns the wire
// events the relay would store.
func produce(t testing.TB, k Key, chunks []string, status stream.Status) [][]byte {
	t.Helper()
	s := NewSealer(k)
	var out [][]byte
	for _, c := range chunks {
		f, err := s.Chunk(c)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, event(t, Event{Sealed: &f}))
	}
	f, err := s.End(status, "")
	if err != nil {
		t.Fatal(err)
	}
	return append(out, event(t, Event{Sealed: &f}))
}

func event(t testing.TB, e Event) []byte {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func clearEvent(t testing.TB, f stream.Frame) []byte { return event(t, Event{Clear: &f}) }

func read(k Key, from int64, held string, events [][]byte) (*Reader, []Violation) {
	var reasons []Violation
	r := NewReader(k, "job_1", from, held, func(v Violation) { reasons = append(reasons, v) })
	for _, e := range events {
		r.Feed(e)
	}
	r.End()
	return r, reasons
}

var chunks = []string{"Hello", ", ", "wörld 😀", "!"}

const produced = "Hello, wörld 😀!"

func TestAnHonestRelayDeliversTheWholeTextAndTheSeal(t *testing.T) {
	p := newPair(t)
	dk, sk := p.keys(t, p.ctx("job_1", "lease_1"))
	events := produce(t, dk, chunks, stream.StatusComplete)
	events = append([][]byte{clearEvent(t, stream.Open("job_1", 0, 0, 0, false))}, events...)
	r, reasons := read(sk, 0, "", events)
	end, ok := r.Terminal()
	if r.Text() != produced || !ok || end.Type != stream.TypeEnd || end.Status != stream.StatusComplete || end.Seq != stream.UTF16Len(produced) {
		t.Fatalf("text %q, terminal %+v, reasons %+v", r.Text(), end, reasons)
	}
}

func TestAReaderResumesFromAnOffsetInsideAFrame(t *testing.T) {
	p := newPair(t)
	dk, sk := p.keys(t, p.ctx("job_1", "lease_1"))
	events := produce(t, dk, chunks, stream.StatusComplete)
	// The reader holds "Hello, wö" (9 units); the relay replays from the
	// frame that contains offset 9, frame 2, which starts at 7.
	r, reasons := read(sk, 9, "Hello, wö", append([][]byte{clearEvent(t, stream.Open("job_1", 7, 15, 7, false))}, events[2:]...))
	if end, _ := r.Terminal(); r.Text() != produced || end.Type != stream.TypeEnd {
		t.Fatalf("text %q, terminal %+v, reasons %+v", r.Text(), end, reasons)
	}
}

// Every way a relay can tamper with the frames it holds is detected: the
// stream ends stale, with text that is a prefix of what was produced. A
// frame that does not open (altered, forged, another stream's) is told
// apart from the relay breaking the lane's order.
func TestTheSiteDetectsEveryTamperingByTheRelay(t *testing.T) {
	p := newPair(t)
	ctx := p.ctx("job_1", "lease_1")
	dk, sk := p.keys(t, ctx)
	otherJob, _ := p.keys(t, p.ctx("job_2", "lease_1"))
	otherLease, _ := p.keys(t, p.ctx("job_1", "lease_2"))
	stranger := newPair(t)
	strangerKey, _ := stranger.keys(t, ctx)

	edit := func(e []byte, change func(*Frame)) []byte {
		var ev Event
		if err := json.Unmarshal(e, &ev); err != nil {
			t.Fatal(err)
		}
		change(ev.Sealed)
		return event(t, ev)
	}
	tests := []struct {
		name     string
		unopened bool
		tamper   func(honest [][]byte) [][]byte
	}{
		{"reordering two frames", false, func(h [][]byte) [][]byte { return [][]byte{h[0], h[2], h[1], h[3], h[4]} }},
		{"dropping a frame", false, func(h [][]byte) [][]byte { return [][]byte{h[0], h[2], h[3], h[4]} }},
		{"duplicating a frame", false, func(h [][]byte) [][]byte { return [][]byte{h[0], h[1], h[1], h[2], h[3], h[4]} }},
		{"dropping the seal", false, func(h [][]byte) [][]byte { return h[:4] }},
		{"splicing in a frame of another job between the same keys", true, func(h [][]byte) [][]byte {
			o := produce(t, otherJob, chunks, stream.StatusComplete)
			return [][]byte{h[0], h[1], o[2], h[3], h[4]}
		}},
		{"splicing in a frame of an earlier lease of the same job", true, func(h [][]byte) [][]byte {
			o := produce(t, otherLease, []string{"Hello", ", ", "evil!!!!", "!"}, stream.StatusComplete)
			return [][]byte{h[0], h[1], o[2], h[3], h[4]}
		}},
		{"substituting a whole stream sealed by another device", true, func(h [][]byte) [][]byte {
			return produce(t, strangerKey, chunks, stream.StatusComplete)
		}},
		{"editing a frame's clear offsets", true, func(h [][]byte) [][]byte {
			return [][]byte{h[0], edit(h[1], func(f *Frame) { f.Seq++ }), h[2], h[3], h[4]}
		}},
		{"renumbering frames to hide a drop", true, func(h [][]byte) [][]byte {
			return [][]byte{h[0], h[1], edit(h[3], func(f *Frame) { f.N = 2; f.From = 7 }), h[4]}
		}},
		{"flipping a ciphertext bit", true, func(h [][]byte) [][]byte {
			return [][]byte{h[0], h[1], edit(h[2], func(f *Frame) {
				raw, _ := protocol.UnB64(f.CT)
				raw[len(raw)-1] ^= 1
				f.CT = protocol.B64(raw)
			}), h[3], h[4]}
		}},
		{"turning a chunk into an end", true, func(h [][]byte) [][]byte {
			return [][]byte{h[0], edit(h[1], func(f *Frame) { f.Kind = KindEnd })}
		}},
		{"injecting clear text", false, func(h [][]byte) [][]byte {
			return [][]byte{h[0], clearEvent(t, stream.Chunk(5, ", evil")), h[2]}
		}},
		{"injecting a clear end", false, func(h [][]byte) [][]byte {
			return [][]byte{h[0], clearEvent(t, stream.End(5, stream.StatusComplete, ""))}
		}},
		{"sending an event that is not a frame", false, func(h [][]byte) [][]byte {
			return [][]byte{h[0], []byte(`{"type":"sealed","n":1}`)}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			honest := produce(t, dk, chunks, stream.StatusComplete)
			r, reasons := read(sk, 0, "", tc.tamper(honest))
			end, ok := r.Terminal()
			if !ok || end.Type != stream.TypeStale {
				t.Fatalf("terminal %+v (text %q): tampering not detected", end, r.Text())
			}
			if !strings.HasPrefix(produced, r.Text()) {
				t.Fatalf("text %q is not a prefix of %q", r.Text(), produced)
			}
			if len(reasons) == 0 {
				t.Fatal("no violation reported")
			}
			if reasons[0].Unopened != tc.unopened {
				t.Fatalf("violation %+v: unopened %v, want %v", reasons[0], reasons[0].Unopened, tc.unopened)
			}
		})
	}
}

func TestTheSealerRefusesWhatNoReaderCouldUse(t *testing.T) {
	p := newPair(t)
	dk, _ := p.keys(t, p.ctx("j", "l"))
	s := NewSealer(dk)
	if _, err := s.Chunk(""); err == nil {
		t.Error("an empty chunk was sealed")
	}
	if _, err := s.Chunk(strings.Repeat("a", MaxTextUnits+1)); err == nil {
		t.Error("an oversized chunk was sealed")
	}
	if _, err := s.End(stream.StatusStreaming, ""); err == nil {
		t.Error("an end with a non-final status was sealed")
	}
	if _, err := s.End(stream.StatusComplete, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Chunk("a"); err == nil {
		t.Error("a chunk after the end was sealed")
	}
	if _, err := DeviceKey(p.device, p.site.Public(), Context{JobID: "j"}); err == nil {
		t.Error("a key was derived for an incomplete context")
	}
}

// Whatever a relay does with sealed frames (any order, drops, duplicates,
// frames of another stream, clear frames of its own), the site's text is a
// prefix of the produced text; and if the stream ends `end`, it is the
// whole text.
func TestPropertyTamperedSealedStreamsNeverCorruptText(t *testing.T) {
	p := newPair(t)
	dk, sk := p.keys(t, p.ctx("job_1", "lease_1"))
	other, _ := p.keys(t, p.ctx("job_1", "lease_0"))
	rapid.Check(t, func(rt *rapid.T) {
		pieces := rapid.SliceOfN(rapid.SampledFrom([]string{"a", "bc", "é", "😀", " word"}), 1, 8).Draw(rt, "chunks")
		text := strings.Join(pieces, "")
		honest := produce(t, dk, pieces, stream.StatusComplete)
		foreign := produce(t, other, pieces, stream.StatusComplete)
		length := stream.UTF16Len(text)
		var events [][]byte
		for _, i := range rapid.SliceOfN(rapid.IntRange(0, 2*len(honest)+3), 0, 3*len(honest)).Draw(rt, "ops") {
			switch {
			case i < len(honest):
				events = append(events, honest[i])
			case i < 2*len(honest):
				events = append(events, foreign[i-len(honest)])
			case i == 2*len(honest):
				events = append(events, clearEvent(t, stream.Open("job_1", 0, length, 0, false)))
			case i == 2*len(honest)+1:
				events = append(events, clearEvent(t, stream.Durable(rapid.Int64Range(0, length).Draw(rt, "durable"))))
			default:
				events = append(events, clearEvent(t, stream.Chunk(0, text)))
			}
		}
		r, _ := read(sk, 0, "", events)
		if !strings.HasPrefix(text, r.Text()) {
			rt.Fatalf("text %q is not a prefix of %q", r.Text(), text)
		}
		if end, _ := r.Terminal(); end.Type == stream.TypeEnd && r.Text() != text {
			rt.Fatalf("ended %+v with %q of %q", end, r.Text(), text)
		}
	})
}
