package telemetry_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/telemetry"
)

// With --log-format json every line is JSON: durations in human units,
// and the plain start-up lines a program prints become records.
func TestJSONLogsAreAllJSON(t *testing.T) {
	var buf bytes.Buffer
	l, err := telemetry.NewLogger("json", &buf)
	if err != nil {
		t.Fatal(err)
	}
	l.Info("draining", "grace", 30*time.Second)
	out := telemetry.Lines("json", &buf, l)
	fmt.Fprintf(out, "toolgate: listening on %s\n", "nats://127.0.0.1:4222")
	fmt.Fprint(out, "toolgate: WARNING: bash sandbox: none")
	fmt.Fprint(out, "\n\n")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []map[string]any{
		{"level": "INFO", "msg": "draining", "grace": "30s"},
		{"level": "INFO", "msg": "listening on nats://127.0.0.1:4222"},
		{"level": "WARN", "msg": "bash sandbox: none"},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), &buf)
	}
	for i, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %d is not JSON: %q", i, line)
		}
		for k, v := range want[i] {
			if rec[k] != v {
				t.Errorf("line %d: %s = %v, want %v", i, k, rec[k], v)
			}
		}
	}
	// The text format keeps the lines as they are.
	var plain bytes.Buffer
	if w := telemetry.Lines("text", &plain, l); w != &plain {
		t.Fatalf("text lines go through %T", w)
	}
}
