package protocol

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/byorelay/byorelay/localtest"
)

// TestVectorsRegenerateFromThePinnedPackage runs the generator against the
// npm packages pinned in localtest/js and checks that it reproduces the
// committed vectors byte for byte, apart from the two values that cannot
// repeat: the result envelope's ciphertext (seal() draws a random ephemeral
// key) and generatedWith (it names the running Node). Without it the file
// and its script could drift apart and nobody could regenerate the file.
func TestVectorsRegenerateFromThePinnedPackage(t *testing.T) {
	node, modules := localtest.RequireNode(t, "@byollm/protocol", "libsodium-wrappers")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "gen-vectors.mjs")
	cmd.Dir = filepath.Dir(modules)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	generated, err := cmd.Output()
	if err != nil {
		t.Fatalf("gen-vectors.mjs: %v\n%s", err, stderr.String())
	}
	committed, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Fatal(err)
	}
	got := bytes.Split(withoutUnrepeatable(t, generated), []byte("\n"))
	want := bytes.Split(withoutUnrepeatable(t, committed), []byte("\n"))
	for i := 0; i < max(len(got), len(want)); i++ {
		if i >= len(got) || i >= len(want) || !bytes.Equal(got[i], want[i]) {
			t.Fatalf("the generator no longer reproduces %s (run make vectors and review the diff); first difference at line %d:\ngenerated: %.200s\ncommitted: %.200s",
				vectorsPath, i+1, lineAt(got, i), lineAt(want, i))
		}
	}
}

func lineAt(lines [][]byte, i int) []byte {
	if i < len(lines) {
		return lines[i]
	}
	return []byte("<end of file>")
}

// withoutUnrepeatable replaces the values of generatedWith and
// resultEnvelope.envelope.ciphertext with a placeholder, leaving every
// other byte of the pretty-printed file as it is.
func withoutUnrepeatable(t *testing.T, file []byte) []byte {
	t.Helper()
	var v struct {
		GeneratedWith  string `json:"generatedWith"`
		ResultEnvelope struct {
			Envelope struct {
				Ciphertext string `json:"ciphertext"`
			} `json:"envelope"`
		} `json:"resultEnvelope"`
	}
	if err := json.Unmarshal(file, &v); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{v.GeneratedWith, v.ResultEnvelope.Envelope.Ciphertext} {
		if s == "" || bytes.Count(file, []byte(`"`+s+`"`)) != 1 {
			t.Fatalf("value %.40q is missing or not unique in the vectors file", s)
		}
		file = bytes.Replace(file, []byte(`"`+s+`"`), []byte(`"<unrepeatable>"`), 1)
	}
	return file
}
