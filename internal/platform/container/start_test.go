package container

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/byorelay/byorelay/internal/platform/version"
)

// Every function's init logs its name and the release, so a deployment's
// logs say which version answered.
func TestInitLogNamesVersion(t *testing.T) {
	var out bytes.Buffer
	initLog(&out, "claim")
	var rec struct {
		Level, Msg, Function, Version string
	}
	if err := json.Unmarshal(out.Bytes(), &rec); err != nil {
		t.Fatalf("init record %q: %v", out.String(), err)
	}
	if rec.Msg != "init" || rec.Level != "INFO" || rec.Function != "claim" || rec.Version != version.Version {
		t.Fatalf("init record %q, want msg init, function claim, version %s", out.String(), version.Version)
	}
}
