package toolctl

import (
	"bytes"
	"flag"
	"os"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/budget"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files under testdata")

// TestFormatBudgets: the table toolctl budgets prints, as a golden file.
func TestFormatBudgets(t *testing.T) {
	now := time.Date(2026, 11, 23, 14, 20, 0, 0, time.UTC)
	us := []budget.Usage{
		{Budget: "hourly", Scope: "agent", Agent: "ci-7", PerMS: time.Hour.Milliseconds(),
			WindowStart: time.Date(2026, 11, 23, 14, 0, 0, 0, time.UTC), Calls: 500, TimeMS: 90_000,
			MaxCalls: 500, MaxTimeMS: (30 * time.Minute).Milliseconds()},
		{Budget: "shell", Scope: "session", Agent: "ci-7", Session: "s-42", Tool: "bash", Calls: 3,
			Running: map[string]budget.Lease{"ci-7/c1": {Worker: "w1"}}, MaxConcurrent: 2},
		{Budget: "shell", Scope: "session", Agent: "ci-8", Calls: 1},
	}
	var b bytes.Buffer
	FormatBudgets(&b, us, now)
	const golden = "testdata/budgets.golden"
	if *updateGolden {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test ./internal/toolctl -run FormatBudgets -update)", err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("got\n%s\nwant\n%s", b.Bytes(), want)
	}
}
