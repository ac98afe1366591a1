package browser

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/teststack"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// artifactDir is where tests leave files for people to look at
// (screenshots): $TOOLGATE_ARTIFACTS when set (CI keeps it), else a
// temporary directory.
func artifactDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("TOOLGATE_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// cardView is what the page shows of a parked call, read in the browser.
type cardView struct {
	Requested string `json:"requested"`
	Expires   string `json:"expires"`
	Why       string `json:"why"`
	Rule      string `json:"rule"`
	Args      string `json:"args"`
	Adds      []string
	Dels      []string
	AddColour string `json:"add_colour"`
	DelColour string `json:"del_colour"`
	CtxColour string `json:"ctx_colour"`
}

// TestApprovalPageReadsWell: a parked overwrite is shown to a person with
// when it was requested, the change as a coloured diff (not the content as
// escaped JSON), the rule that asked in plain words, and one date format;
// a screenshot of the page is kept as an artifact.
func TestApprovalPageReadsWell(t *testing.T) {
	chromium := testenv.LookPath(t, "chromium", "chromium")
	s := teststack.StartApprovalStack(t, teststack.AskWrites)
	teststack.WriteFile(t, filepath.Join(s.Worker.Workspace, "config.txt"), "alpha\nbeta\ngamma\n")
	c := teststack.Client(t, s.Worker.URL, "agent-page")
	final := teststack.SubmitWrite(t, c, "page-1", "config.txt", "alpha\nBETA\ngamma\n")

	card := `.card[data-call-id="page-1"]`
	tctx := openPage(t, chromium, s.URL, card+` pre.diff`)
	v, err := chromedp.Run(tctx, chromedp.Evaluate[cardView](`(() => {
		const c = document.querySelector('`+card+`');
		const txt = s => { const e = c.querySelector(s); return e ? e.innerText.trim() : ""; };
		const colour = s => { const e = c.querySelector(s); return e ? getComputedStyle(e).backgroundColor : ""; };
		return {
			requested: txt(".requested time"), expires: txt("time.expires"),
			why: txt(".why .plain"), rule: txt(".why .rule"), args: txt("pre.args"),
			Adds: [...c.querySelectorAll("pre.diff .add")].map(e => e.innerText.trim()),
			Dels: [...c.querySelectorAll("pre.diff .del")].map(e => e.innerText.trim()),
			add_colour: colour("pre.diff .add"), del_colour: colour("pre.diff .del"), ctx_colour: colour("pre.diff .ctx"),
		};
	})()`))
	if err != nil {
		t.Fatalf("read the card: %v", err)
	}
	screenshot(t, tctx, "approval-page.png")

	dateFormat := regexp.MustCompile(`^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$`)
	if !dateFormat.MatchString(v.Requested) {
		t.Errorf("requested time %q is not YYYY-MM-DD HH:MM:SS", v.Requested)
	}
	if !dateFormat.MatchString(v.Expires) {
		t.Errorf("expiry time %q is not YYYY-MM-DD HH:MM:SS", v.Expires)
	}
	// The diff, coloured: the changed line removed and added, the others
	// as context, and each kind of line with its own background.
	if strings.Join(v.Dels, "|") != "-beta" || strings.Join(v.Adds, "|") != "+BETA" {
		t.Errorf("diff lines: removed %q, added %q", v.Dels, v.Adds)
	}
	if v.AddColour == "" || v.AddColour == v.DelColour || v.AddColour == v.CtxColour || v.DelColour == v.CtxColour {
		t.Errorf("diff lines are not told apart by colour: add %q del %q context %q", v.AddColour, v.DelColour, v.CtxColour)
	}
	// The arguments without the content as escaped JSON.
	if !strings.Contains(v.Args, "path: config.txt") || strings.Contains(v.Args, `\n`) || strings.Contains(v.Args, `"content"`) {
		t.Errorf("arguments shown as:\n%s", v.Args)
	}
	if v.Rule != "tools.write_file.action" || !strings.Contains(v.Why, "rule for write_file asks a person before every call") {
		t.Errorf("why: %q (rule %q)", v.Why, v.Rule)
	}

	if err := chromedp.Do(tctx, chromedp.Click(chromedp.CSS(card+` button[data-action="approve"]`))); err != nil {
		t.Fatalf("click Approve: %v", err)
	}
	if r := teststack.Wait(t, final); r.Status != events.StatusOK {
		t.Fatalf("result after Approve = %+v", r)
	}
	when := `#history tr[data-call-id="page-1"] .when time`
	if err := chromedp.Do(tctx, chromedp.WaitVisible(chromedp.CSS(when))); err != nil {
		t.Fatalf("history row: %v", err)
	}
	// The row may be drawn before its time is filled in: wait for it.
	decided, err := textWhen(tctx, chromedp.CSS(when), func(s string) bool { return dateFormat.MatchString(strings.TrimSpace(s)) })
	if err != nil || !dateFormat.MatchString(strings.TrimSpace(decided)) {
		t.Errorf("history shows the decision time as %q (%v), not in the page's one format", decided, err)
	}
}

// textWhen reads the text of sel until ok accepts it, for up to 30
// seconds: the page redraws its tables as the bus changes, so a read may
// meet a row not yet filled in, or one replaced under it ("No node with
// given id found"). It returns the last text read and its error.
func textWhen(ctx context.Context, sel chromedp.CSS, ok func(string) bool) (string, error) {
	for end := time.Now().Add(30 * time.Second); ; {
		text, err := chromedp.Run(ctx, chromedp.Text(sel))
		if err == nil && ok(text) || time.Now().After(end) {
			return text, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// openPage starts chromium, logs in to the approver page at url as alice
// and waits until sel is visible. The context it returns bounds the rest.
func openPage(t *testing.T, chromium, url, sel string) context.Context {
	t.Helper()
	return openPageSized(t, chromium, url, sel, 1100, 900)
}

// openPageSized is openPage in a window of width × height pixels.
func openPageSized(t *testing.T, chromium, url, sel string, width, height int) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium), chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true), chromedp.Flag("no-sandbox", true), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("no-first-run", true),
		chromedp.WindowSize(width, height),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(acancel)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	// The first run starts the browser and must not carry a timeout.
	if err := chromedp.Do(ctx, chromedp.Navigate(url+"/")); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	tctx, tcancel := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(tcancel)
	if err := chromedp.Do(tctx,
		// A window may not be as narrow as a phone: the viewport may.
		chromedp.EmulateViewport(int64(width), int64(height)),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), teststack.AliceToken),
		chromedp.Click(chromedp.CSS(`#login-button`)),
		chromedp.WaitVisible(chromedp.CSS(sel)),
	); err != nil {
		t.Fatalf("log in and see %s: %v", sel, err)
	}
	return tctx
}

// screenshot keeps a picture of the whole page as an artifact.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	file := filepath.Join(artifactDir(t), name)
	if err := os.WriteFile(file, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the page: %s", file)
}

// TestApprovalPageShowsACommand: a shell command the built-in policy asks
// about is shown as the command line, with why in plain words.
func TestApprovalPageShowsACommand(t *testing.T) {
	chromium := testenv.LookPath(t, "chromium", "chromium")
	w := teststack.StartWorker(t, teststack.NewWorkspace(t), nil) // the built-in policy
	url := teststack.StartApprover(t, w.URL, nil)

	c := teststack.Client(t, w.URL, "agent-shell")
	parked := make(chan struct{}, 1)
	go func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer ccancel()
		_, _ = c.Call(cctx, "bash", map[string]any{"command": "git push origin main"}, client.WithID("page-cmd"),
			client.OnPending(func(events.ResultData) { parked <- struct{}{} }))
	}()
	select {
	case <-parked:
	case <-time.After(60 * time.Second):
		t.Fatal("the command was not parked")
	}

	card := `.card[data-call-id="page-cmd"]`
	tctx := openPage(t, chromium, url, card)
	v, err := chromedp.Run(tctx, chromedp.Evaluate[cardView](`(() => {
		const c = document.querySelector('`+card+`');
		const txt = s => { const e = c.querySelector(s); return e ? e.innerText.trim() : ""; };
		return { why: txt(".why .plain") + " | " + txt(".why .reason"), rule: txt(".why .rule"), args: txt("pre.args .cmd"), requested: txt(".requested time") };
	})()`))
	if err != nil {
		t.Fatalf("read the card: %v", err)
	}
	screenshot(t, tctx, "approval-page-command.png")
	if v.Args != "$ git push origin main" {
		t.Errorf("command shown as %q", v.Args)
	}
	if v.Rule != "builtin.classify.dangerous" || !strings.Contains(v.Why, "changes things") || !strings.Contains(v.Why, "git push writes to the repository") {
		t.Errorf("why: %q (rule %q)", v.Why, v.Rule)
	}
	if !regexp.MustCompile(`^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$`).MatchString(v.Requested) {
		t.Errorf("requested time %q", v.Requested)
	}
}

// TestApprovalPageInChromium: a person logs in to the approver page,
// sees the parked write with its arguments, clicks Approve, and the write
// runs; the history shows the call approved.
func TestApprovalPageInChromium(t *testing.T) {
	chromium := testenv.LookPath(t, "chromium", "chromium")
	s := teststack.StartApprovalStack(t, teststack.AskWrites)
	c := teststack.Client(t, s.Worker.URL, "agent-web")
	final := teststack.SubmitWrite(t, c, "web-1", "from-browser.txt", "clicked\n")

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium), chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true), chromedp.Flag("no-sandbox", true), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("no-first-run", true),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	// The first run starts the browser and must not carry a timeout.
	if err := chromedp.Do(ctx, chromedp.Navigate(s.URL+"/")); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	tctx, tcancel := context.WithTimeout(ctx, 90*time.Second)
	defer tcancel()

	card := chromedp.CSS(`.card[data-call-id="web-1"]`)
	err := chromedp.Do(tctx,
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), teststack.AliceToken),
		chromedp.Click(chromedp.CSS(`#login-button`)),
		chromedp.WaitVisible(card),
	)
	if err != nil {
		t.Fatalf("log in and see the call: %v", err)
	}
	identity, err := chromedp.Run(tctx, chromedp.Text(chromedp.CSS(`#identity`)))
	if err != nil || identity != "alice" {
		t.Fatalf("page shows identity %q: %v", identity, err)
	}
	args, err := chromedp.Run(tctx, chromedp.Text(card+` pre.args`))
	if err != nil || !strings.Contains(args, "from-browser.txt") {
		t.Fatalf("page shows arguments %q: %v", args, err)
	}
	if err := chromedp.Do(tctx, chromedp.Click(card+` button[data-action="approve"]`)); err != nil {
		t.Fatalf("click Approve: %v", err)
	}
	r := teststack.Wait(t, final)
	if r.Status != events.StatusOK {
		t.Fatalf("result after clicking Approve = %+v", r)
	}
	if b, err := os.ReadFile(filepath.Join(s.Worker.Workspace, "from-browser.txt")); err != nil || string(b) != "clicked\n" {
		t.Fatalf("file: %q %v", b, err)
	}
	row := chromedp.CSS(`#history tr[data-call-id="web-1"]`)
	if err := chromedp.Do(tctx, chromedp.WaitVisible(row), chromedp.WaitNotPresent(card)); err != nil {
		t.Fatalf("history row: %v", err)
	}
	// The history is drawn again as it refreshes: a row read while it is
	// replaced is gone ("No node with given id"); read the new one.
	var status string
	for range 20 {
		if err = chromedp.Do(tctx, chromedp.WaitVisible(row)); err != nil {
			continue
		}
		if status, err = chromedp.Run(tctx, chromedp.Text(row+` .status`)); err == nil {
			break
		}
	}
	if err != nil || status != "approved" {
		t.Fatalf("history shows %q: %v", status, err)
	}
}

// TestApprovalPageFitsAPhone: at a phone's 390 px the page has no
// horizontal scroll, and a parked compound command offers to always allow
// its whole simple command ("rm -rf node_modules"), never "rm" alone, with
// the wider choice in a list.
func TestApprovalPageFitsAPhone(t *testing.T) {
	chromium := testenv.LookPath(t, "chromium", "chromium")
	w := teststack.StartWorker(t, teststack.NewWorkspace(t), nil) // the built-in policy
	url := teststack.StartApprover(t, w.URL, nil)
	c := teststack.Client(t, w.URL, "agent-phone")
	parked := make(chan struct{}, 2)
	for id, command := range map[string]string{"page-phone": "rm -rf node_modules && npm ci", "page-decided": "git push origin feature/a-long-branch-name"} {
		go func() {
			cctx, ccancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer ccancel()
			_, _ = c.Call(cctx, "bash", map[string]any{"command": command}, client.WithID(id),
				client.OnPending(func(events.ResultData) { parked <- struct{}{} }))
		}()
	}
	testenv.Recv(t, parked, "the first command parked")
	testenv.Recv(t, parked, "the second command parked")

	card := `.card[data-call-id="page-phone"]`
	tctx := openPageSized(t, chromium, url, card+`,.card[data-call-id="page-decided"]`, 390, 844)
	// A decided call fills the history table, the page's widest part.
	if err := chromedp.Do(tctx,
		chromedp.WaitVisible(chromedp.CSS(card)),
		chromedp.Click(chromedp.CSS(`.card[data-call-id="page-decided"] button[data-action="approve"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#history tr[data-call-id="page-decided"]`)),
	); err != nil {
		t.Fatalf("approve a call: %v", err)
	}
	type fit struct {
		Window   int      `json:"window"`
		Viewport int      `json:"viewport"`
		Scroll   int      `json:"scroll"`
		Wide     []string `json:"wide"`
		Always   string   `json:"always"`
		Choices  []string `json:"choices"`
	}
	v, err := chromedp.Run(tctx, chromedp.Evaluate[fit](`(() => {
		const c = document.querySelector('`+card+`');
		const vw = document.documentElement.clientWidth;
		const wide = [...document.querySelectorAll("body *")].filter(e => {
			const r = e.getBoundingClientRect();
			return r.width > 0 && r.right > vw + 1 && getComputedStyle(e).position !== "fixed";
		}).slice(0, 5).map(e => e.tagName.toLowerCase() + "." + e.className + " right " + Math.round(e.getBoundingClientRect().right));
		const always = c.querySelector('button[data-action="always"]');
		return { window: window.innerWidth, viewport: vw, scroll: document.documentElement.scrollWidth, wide: wide,
			always: always ? always.innerText.trim() : "",
			choices: [...c.querySelectorAll('select[data-action="widen"] option')].map(o => o.innerText.trim()) };
	})()`))
	if err != nil {
		t.Fatalf("read the page: %v", err)
	}
	screenshot(t, tctx, "approval-page-390px.png")
	if v.Window != 390 {
		t.Fatalf("the window is %d px wide, not 390", v.Window)
	}
	if v.Scroll > v.Viewport {
		t.Errorf("the page scrolls sideways at 390 px: %d px wide in a %d px viewport (beside its scroll bar); too wide: %q", v.Scroll, v.Viewport, v.Wide)
	}
	if !strings.Contains(v.Always, "“rm -rf node_modules”") || strings.Contains(v.Always, "“rm”") {
		t.Errorf("always allow offers %q, want the whole command rm -rf node_modules", v.Always)
	}
	if strings.Join(v.Choices, "|") != "just: rm -rf node_modules|wider: rm -rf …" {
		t.Errorf("wider choices: %q", v.Choices)
	}
}
