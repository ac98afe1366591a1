package browser

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/teststack"
	"github.com/toolgate/toolgate/pkg/events"
)

// startEditStack is an approval stack under editPolicy with a directory x
// in a workspace the sandboxed commands could write to.
func startEditStack(t *testing.T) *teststack.ApprovalStack {
	t.Helper()
	testenv.LookPath(t, "bash", "bash")
	s := teststack.StartApprovalStack(t, teststack.EditPolicy)
	if err := os.Chmod(s.Worker.Workspace, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(s.Worker.Workspace, "x", "inside"), 0o755); err != nil {
		t.Fatal(err)
	}
	return s
}

// editBox is what the page's "edit arguments" box shows, read in the browser.
type editBox struct {
	Status   string   `json:"status"`
	Disabled bool     `json:"disabled"`
	Adds     []string `json:"adds"`
	Dels     []string `json:"dels"`
}

// TestApprovalPageApprovesWithChanges: a person opens the "edit arguments"
// box of a parked `rm -rf x`, is told while typing that the text is not
// JSON yet (and cannot approve), sees the diff against the parked
// arguments once it is, and approves with changes: `ls` runs, x stays.
// A screenshot of the box is kept as an artifact.
func TestApprovalPageApprovesWithChanges(t *testing.T) {
	chromium := testenv.LookPath(t, "chromium", "chromium")
	s := startEditStack(t)
	c := teststack.Client(t, s.Worker.URL, "agent-page-edit")
	final := teststack.SubmitBash(t, c, "page-edit", "rm -rf x")

	card := `.card[data-call-id="page-edit"]`
	area := chromedp.CSS(card + ` textarea.edit-args`)
	tctx := openPage(t, chromium, s.URL, card)
	read := func() editBox {
		t.Helper()
		v, err := chromedp.Run(tctx, chromedp.Evaluate[editBox](`(() => {
			const c = document.querySelector('`+card+`');
			return {
				status: c.querySelector(".edit-status").innerText.trim(),
				disabled: c.querySelector('button[data-action="approve-edit"]').disabled,
				adds: [...c.querySelectorAll(".edit-diff .add")].map(e => e.innerText.trim()),
				dels: [...c.querySelectorAll(".edit-diff .del")].map(e => e.innerText.trim()),
			};
		})()`))
		if err != nil {
			t.Fatalf("read the edit box: %v", err)
		}
		return v
	}
	if err := chromedp.Do(tctx,
		chromedp.Click(chromedp.CSS(card+` details.edit summary`)),
		chromedp.WaitVisible(area),
	); err != nil {
		t.Fatalf("open the editor: %v", err)
	}
	// Select all the parked arguments, as ctrl-A does, and type over them.
	if _, err := chromedp.Run(tctx, chromedp.Evaluate[bool](`(() => { const a = document.querySelector('`+card+` textarea.edit-args'); a.focus(); a.select(); return true; })()`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(tctx, chromedp.SendKeys(area, `{"command": "ls"`)); err != nil {
		t.Fatalf("type: %v", err)
	}
	if v := read(); !strings.Contains(v.Status, "not valid JSON") || !v.Disabled || len(v.Adds)+len(v.Dels) != 0 {
		t.Fatalf("half-typed JSON: %+v", v)
	}
	if err := chromedp.Do(tctx, chromedp.SendKeys(area, `}`)); err != nil {
		t.Fatal(err)
	}
	v := read()
	if v.Disabled || strings.Join(v.Dels, "|") != `-  "command": "rm -rf x"` || strings.Join(v.Adds, "|") != `+  "command": "ls"` {
		t.Fatalf("edited arguments: %+v", v)
	}
	screenshot(t, tctx, "approval-page-edit.png")
	if err := chromedp.Do(tctx, chromedp.Click(chromedp.CSS(card+` button[data-action="approve-edit"]`))); err != nil {
		t.Fatalf("click Approve with changes: %v", err)
	}
	r := teststack.Wait(t, final)
	if r.Status != events.StatusOK || strings.TrimSpace(r.Output) != "x" {
		t.Fatalf("result = %s %q, want ls's output", r.Status, r.Output)
	}
	if _, err := os.Stat(filepath.Join(s.Worker.Workspace, "x", "inside")); err != nil {
		t.Fatalf("x after the edited call: %v", err)
	}
	row := chromedp.CSS(`#history tr[data-call-id="page-edit"]`)
	if err := chromedp.Do(tctx, chromedp.WaitVisible(row+` .edited`)); err != nil {
		t.Fatalf("history row with the changes: %v", err)
	}
	edited, err := textWhen(tctx, row+` .edited`, func(s string) bool { return strings.Contains(s, `{"command":"ls"}`) })
	if err != nil || !strings.Contains(edited, `{"command":"ls"}`) {
		t.Fatalf("history shows %q: %v", edited, err)
	}
}
