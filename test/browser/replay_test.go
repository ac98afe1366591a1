package browser

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toolgate/toolgate/internal/policyreplay"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
)

// replayPage is what the replay page shows, read in the browser.
type replayPage struct {
	Rows      [][]string `json:"rows"`
	Bars      []string   `json:"bars"`
	BarWidth  []float64  `json:"bar_width"`
	Resources int        `json:"resources"`
}

// TestReplayPageRenders: the page `toolctl policy replay --html` writes
// opens in chromium from a file, loads nothing else, and shows one table
// row per changed call (time, agent, tool, call, input, then, now, why)
// and one chart bar per count, the longest for the largest. A screenshot
// is kept as an artifact.
func TestReplayPageRenders(t *testing.T) {
	chromium := testenv.LookPath(t, "chromium", "chromium")
	p, _, err := policy.Parse([]byte("tools: {read: deny, bash: {}}\n"), "next.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := policyreplay.New(p, policyreplay.Options{})
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ws := t.TempDir()
	for i, a := range []events.AuditData{
		{CallID: "c-1", Agent: "dev-1", Tool: "read", Judged: &events.Judged{Workspace: ws, Path: "README.md"},
			Decision: &events.Decision{Action: "allow", Rule: "tools.read.action"}},
		{CallID: "c-2", Agent: "dev-2", Tool: "read", Judged: &events.Judged{Workspace: ws, Path: "<b>notes</b>.txt"},
			Decision: &events.Decision{Action: "allow", Rule: "tools.read.action"}},
		{CallID: "c-3", Agent: "dev-1", Tool: "bash", Judged: &events.Judged{Workspace: ws, Command: "ls -la"},
			Decision: &events.Decision{Action: "allow", Rule: "builtin.classify.read_only"}},
		{CallID: "c-4", Agent: "dev-1", Tool: "read", Decision: &events.Decision{Action: "allow", Rule: "tools.read.action"}},
	} {
		a.Kind, a.DecidedBy, a.Time = events.AuditDecision, []string{"policy"}, t0.Add(time.Duration(i)*time.Minute)
		r.Add(context.Background(), &a)
	}
	file := filepath.Join(t.TempDir(), "replay.html")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Result().HTML(f); err != nil {
		t.Fatal(err)
	}
	f.Close()

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium), chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true), chromedp.Flag("no-sandbox", true), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("no-first-run", true),
		chromedp.WindowSize(1100, 900),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate("file://"+file)); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	tctx, tcancel := context.WithTimeout(ctx, 60*time.Second)
	defer tcancel()
	if err := chromedp.Do(tctx, chromedp.WaitVisible(chromedp.CSS(`#changes`))); err != nil {
		t.Fatalf("no table: %v", err)
	}
	got, err := chromedp.Run(tctx, chromedp.Evaluate[replayPage](`(() => ({
		rows: [...document.querySelectorAll("#changes tbody tr")].map(r => [...r.cells].map(c => c.innerText.trim())),
		bars: [...document.querySelectorAll("#summary g.bar")].map(g => [...g.querySelectorAll("text")].map(x => x.textContent.trim()).join(" ")),
		bar_width: [...document.querySelectorAll("#summary rect")].map(r => r.getBoundingClientRect().width),
		resources: performance.getEntriesByType("resource").length,
	}))()`))
	if err != nil {
		t.Fatal(err)
	}
	screenshot(t, tctx, "replay-page.png")
	if len(got.Rows) != 2 {
		t.Fatalf("%d rows, want the 2 changed calls: %v", len(got.Rows), got.Rows)
	}
	want := [][]string{
		{"2026-03-01T12:00:00Z", "dev-1", "read", "c-1", "README.md", "allow tools.read.action", "deny tools.read.action", "tool read: deny by tools.read.action"},
		{"2026-03-01T12:01:00Z", "dev-2", "read", "c-2", "<b>notes</b>.txt", "allow tools.read.action", "deny tools.read.action", "tool read: deny by tools.read.action"},
	}
	for i, row := range want {
		for j, cell := range row {
			if got.Rows[i][j] != cell {
				t.Errorf("row %d cell %d: %q, want %q", i, j, got.Rows[i][j], cell)
			}
		}
	}
	if len(got.Bars) != 8 || got.Bars[0] != "unchanged 1" || got.Bars[2] != "allow→deny 2" || got.Bars[7] != "not replayable 1" {
		t.Errorf("chart bars %q", got.Bars)
	}
	if got.BarWidth[2] <= got.BarWidth[0] || got.BarWidth[1] != 0 {
		t.Errorf("bar widths %v: the largest count is not the longest bar", got.BarWidth)
	}
	if got.Resources != 0 {
		t.Errorf("the page loaded %d resources: it must be self-contained", got.Resources)
	}
}
