package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestInvokeRefusesMisuse(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"no function or event", nil, 2},
		{"an event without a function", []string{"../../events/claim.json"}, 2},
		{"a function that does not exist", []string{"nope", "../../events/claim.json"}, 2},
		{"an event file that does not exist", []string{"claim", "no-such-event.json"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errs bytes.Buffer
			if code := runInvoke(context.Background(), tt.args, &out, &errs); code != tt.code {
				t.Fatalf("exit %d, want %d (stderr: %s)", code, tt.code, errs.String())
			}
			if out.Len() != 0 {
				t.Errorf("stdout = %q, want nothing", out.String())
			}
		})
	}
}

// The self-contained path: no TABLE_NAME, so invoke starts DynamoDB Local,
// seeds the demo (keys made fresh in a temporary directory) and runs the
// catch-all's sample event, which must answer as the reference answers a
// claim outside the base path.
func TestInvokeInProcessRunsASampleEventAgainstItsOwnDynamoDBLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts DynamoDB Local")
	}
	t.Setenv("BYORELAY_DEMO_DIR", t.TempDir())
	t.Setenv("TABLE_NAME", "")
	var out, errs bytes.Buffer
	if code := runInvoke(context.Background(), []string{"-in-process", "catchall", "../../events/catchall.json"}, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	var resp struct {
		StatusCode int    `json:"statusCode"`
		Body       string `json:"body"`
	}
	if err := json.Unmarshal(out.Bytes(), &resp); err != nil {
		t.Fatalf("stdout is not a response: %q", out.String())
	}
	if resp.StatusCode != 404 || resp.Body != `{"error":"not-found"}` {
		t.Fatalf("answer = %d %s", resp.StatusCode, resp.Body)
	}
	if !strings.Contains(errs.String(), `"Refusals":1`) {
		t.Errorf("no EMF record on stderr:\n%s", errs.String())
	}
}
