package test

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/tools"
)

// progressLimit is the workers' progress bound in these tests: small, so
// that a chatty command meets it.
var progressLimit = tools.ProgressLimit{PerSecond: 5, MaxBytes: 1024, Backlog: 4096}

// chatty prints 30,000 numbered lines, then a last line.
const chatty = `seq -f 'line-%g' 1 30000; echo last-line`

// startProgressWorker is a worker allowing every call, with progressLimit,
// serving MCP over HTTP as agent mcp-progress when mcp is set.
func startProgressWorker(t *testing.T, mcpURL chan<- string) *process {
	t.Helper()
	testenv.LookPath(t, "bash", "bash")
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, "tools:\n  default: allow\n")
	return startProcess(t, newWorkspace(t), func(o *daemon.Options) {
		o.PolicyFile, o.Progress = pol, progressLimit
		if mcpURL != nil {
			o.MCPListen, o.MCPAgent, o.MCPInsecureLoopback = "127.0.0.1:0", "mcp-progress", true
			o.MCPReady = func(u string) { mcpURL <- u }
		}
	})
}

// progressBound is the most messages a call of elapsed may publish: the
// rate while it runs, plus what waits at its end (data and notes).
func progressBound(elapsed time.Duration) int {
	l := progressLimit
	return int((elapsed.Seconds()+1)*float64(l.PerSecond)) + 2*(l.Backlog/l.MaxBytes) + 2
}

func stdoutBytes(ps []events.ProgressData) int {
	n := 0
	for _, p := range ps {
		if p.Stream == tools.StreamStdout {
			n += len(p.Chunk)
		}
	}
	return n
}

var (
	lineRE = regexp.MustCompile(`^line-(\d+)$`)
	noteRE = regexp.MustCompile(`\n\.\.\. \[\d+ bytes not streamed[^\n]*\n`)
)

// checkOrdered fails unless the numbered lines of stdout only go up. The
// lines cut by a note of what was left out are not counted.
func checkOrdered(t *testing.T, stdout string) {
	t.Helper()
	prev, seen := 0, 0
	for i, piece := range noteRE.Split(stdout, -1) {
		lines := strings.Split(piece, "\n")
		lines = lines[:len(lines)-1] // the last is cut, or empty
		if i > 0 && len(lines) > 0 {
			lines = lines[1:] // the first may be cut
		}
		for _, l := range lines {
			m := lineRE.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			n, _ := strconv.Atoi(m[1])
			if n <= prev {
				t.Fatalf("line-%d streamed after line-%d", n, prev)
			}
			prev = n
			seen++
		}
	}
	if seen < 10 {
		t.Fatalf("only %d whole numbered lines streamed", seen)
	}
}

// TestProgressIsBoundedAndOrdered: a command printing 300 KB streams its
// output in order, in at most as many messages as the rate allows, none
// over the byte bound, the first lines as they come and the last line
// before the result; the result keeps the whole bounded output.
func TestProgressIsBoundedAndOrdered(t *testing.T) {
	w := startProgressWorker(t, nil)
	nc, _, err := identity.Dial(w.url, "", identity.RoleAgent, "agent-progress")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := client.New(nc, "agent-progress")
	if err != nil {
		t.Fatal(err)
	}
	// Progress and result on one subscription, in the order they arrive.
	ch := make(chan *nats.Msg, 1<<16)
	for _, subj := range []string{events.ProgressSubject("agent-progress", "chatty-1"), events.ResultSubject("agent-progress", "chatty-1")} {
		sub, err := nc.ChanSubscribe(subj, ch)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}

	var got []events.ProgressData
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	res, err := c.Call(ctx, "bash", map[string]any{"command": chatty}, client.WithID("chatty-1"),
		client.OnProgress(func(p events.ProgressData) { got = append(got, p) }))
	elapsed := time.Since(start)
	if err != nil || res.Status != events.StatusOK {
		t.Fatalf("call: %+v %v", res, err)
	}
	var stdout strings.Builder
	for i, p := range got {
		if p.Seq != int64(i+1) || p.CallID != "chatty-1" || p.Tool != "bash" {
			t.Fatalf("message %d: seq %d call %s tool %s", i, p.Seq, p.CallID, p.Tool)
		}
		if len(p.Chunk) > progressLimit.MaxBytes {
			t.Fatalf("message %d carries %d bytes, more than %d", i, len(p.Chunk), progressLimit.MaxBytes)
		}
		if p.Stream == tools.StreamStdout {
			stdout.WriteString(p.Chunk)
		}
	}
	t.Logf("%d progress messages (%d bytes of stdout streamed of %d) in %s; bound %d", len(got), stdoutBytes(got), len(res.Metadata["stdout"].(string)), elapsed, progressBound(elapsed))
	if n := len(got); n < 2 || n > progressBound(elapsed) {
		t.Fatalf("%d progress messages in %s; bound %d", n, elapsed, progressBound(elapsed))
	}
	s := stdout.String()
	if !strings.HasPrefix(s, "line-1\nline-2\n") || !strings.HasSuffix(s, "last-line\n") || !strings.Contains(s, "bytes not streamed") {
		t.Fatalf("streamed stdout (%d bytes) does not start with the first lines, end with the last, and say what it left out:\n%.300s\n...\n%s",
			len(s), s, s[max(0, len(s)-300):])
	}
	checkOrdered(t, s)
	if !strings.HasSuffix(strings.TrimSpace(res.Metadata["stdout"].(string)), "last-line") {
		t.Fatalf("the result lacks the end of the output")
	}
	// Every progress message arrived before the result.
	for i := 0; ; i++ {
		m := testenv.Recv(t, ch, "ch")
		if m.Subject == events.ResultSubject("agent-progress", "chatty-1") {
			if i != len(got) {
				t.Fatalf("the result arrived after %d progress messages of %d", i, len(got))
			}
			break
		}
	}
}

// TestProgressRateOverTime: a command printing a line every 20 ms for
// about two seconds streams as it goes, its lines coalesced into at most
// the rate's messages a second.
func TestProgressRateOverTime(t *testing.T) {
	w := startProgressWorker(t, nil)
	c := w.client(t, "agent-ticks")
	var got []events.ProgressData
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	words := make([]string, 100)
	for i := range words {
		words[i] = strconv.Itoa(i + 1)
	}
	cmd := "for i in " + strings.Join(words, " ") + "; do echo tick; sleep 0.02; done" // nothing the policy asks about
	res, err := c.Call(ctx, "bash", map[string]any{"command": cmd},
		client.OnProgress(func(p events.ProgressData) { got = append(got, p) }))
	elapsed := time.Since(start)
	if err != nil || res.Status != events.StatusOK {
		t.Fatalf("call: %+v %v", res, err)
	}
	var stdout strings.Builder
	for _, p := range got {
		stdout.WriteString(p.Chunk)
	}
	t.Logf("%d progress messages for 100 lines in %s; bound %d", len(got), elapsed, progressBound(elapsed))
	if len(got) < 2 || len(got) > progressBound(elapsed) || len(got) >= 100 {
		t.Fatalf("%d messages for 100 lines in %s; bound %d", len(got), elapsed, progressBound(elapsed))
	}
	if want := res.Metadata["stdout"].(string); stdout.String() != want {
		t.Fatalf("streamed %q, the result's stdout %q", stdout.String(), want)
	}
}

// TestCallFollow: `toolctl call --follow` prints the output as it streams
// and not again when the stream carried all of it; when the bound left
// some out, it says so and prints the result's output.
func TestCallFollow(t *testing.T) {
	w := startProgressWorker(t, nil)
	out, errOut, code := w.toolctl(t, "call", "bash", "command=echo one; echo two >&2; echo three", "--follow")
	if code != 0 || out != "one\nthree\n" || !strings.Contains(errOut, "two\n") || strings.Contains(errOut, "did not carry") {
		t.Fatalf("follow: code %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	out, errOut, code = w.toolctl(t, "call", "bash", "command="+chatty, "--follow")
	if code != 0 || !strings.Contains(errOut, "the stream did not carry the whole output") || !strings.HasPrefix(out, "line-1\n") ||
		!strings.HasSuffix(out, "last-line\n") || strings.Count(out, "last-line\n") != 2 {
		t.Fatalf("follow a chatty command: code %d, stderr %q, stdout %d bytes", code, errOut, len(out))
	}
}

// TestGrepReportsProgress: a search over a big tree says how many files
// it searched as it goes.
func TestGrepReportsProgress(t *testing.T) {
	w := startProgressWorker(t, nil)
	for i := range 2500 {
		writeFile(t, filepath.Join(w.ws, "tree", fmt.Sprintf("d%02d", i%25), fmt.Sprintf("f%04d.txt", i)), fmt.Sprintf("file %d\n", i))
	}
	writeFile(t, filepath.Join(w.ws, "tree", "needle.txt"), "needle\n")
	c := w.client(t, "agent-grep")
	var status strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := c.Call(ctx, "grep", map[string]any{"pattern": "needle", "path": "tree"},
		client.OnProgress(func(p events.ProgressData) {
			if p.Stream == tools.StreamStatus {
				status.WriteString(p.Chunk)
			}
		}))
	if err != nil || res.Status != events.StatusOK || !strings.Contains(res.Output, "needle.txt") {
		t.Fatalf("grep: %+v %v", res, err)
	}
	if !strings.Contains(status.String(), "searched 1000 files") || !strings.Contains(status.String(), "searched 2000 files") {
		t.Fatalf("grep's progress: %q", status.String())
	}
}

// TestMCPProgressNotifications: an MCP client that sends a progress token
// gets the command's output as notifications/progress, bounded, in order
// (the SDK's client may hand notifications to the handler after the
// result, so the test waits for the last line, then orders them by their
// progress count, which the server sets in the order it sends).
func TestMCPProgressNotifications(t *testing.T) {
	u := make(chan string, 1)
	startProgressWorker(t, u)
	var mu sync.Mutex
	var notes []*mcp.ProgressNotificationParams
	lastLine := make(chan struct{})
	var once sync.Once
	c := mcp.NewClient(&mcp.Implementation{Name: "progress-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			notes = append(notes, req.Params)
			if strings.HasSuffix(req.Params.Message, "last-line\n") {
				once.Do(func() { close(lastLine) })
			}
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: testenv.Recv(t, u, "u")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	// The face offers the tools once it has listed them from a worker.
	for found := false; !found; {
		lt, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		found = slices.ContainsFunc(lt.Tools, func(tl *mcp.Tool) bool { return tl.Name == "bash" })
		if !found {
			select {
			case <-ctx.Done():
				t.Fatal("the MCP face never offered bash")
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	params := &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": chatty}}
	params.SetProgressToken("chatty-mcp")
	start := time.Now()
	r, err := cs.CallTool(ctx, params)
	elapsed := time.Since(start)
	if err != nil || r.IsError {
		t.Fatalf("call: %v %+v", err, r)
	}
	select {
	case <-lastLine:
	case <-time.After(30 * time.Second):
		t.Fatal("no notification carried the last line")
	}
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(notes, func(a, b *mcp.ProgressNotificationParams) int { return cmp.Compare(a.Progress, b.Progress) })
	var stdout strings.Builder
	for i, n := range notes {
		if n.ProgressToken != "chatty-mcp" || n.Progress != float64(i+1) {
			t.Fatalf("notification %d: token %v progress %v", i, n.ProgressToken, n.Progress)
		}
		stdout.WriteString(n.Message)
	}
	t.Logf("%d notifications in %s; bound %d", len(notes), elapsed, progressBound(elapsed))
	if len(notes) < 2 || len(notes) > progressBound(elapsed) {
		t.Fatalf("%d notifications in %s; bound %d", len(notes), elapsed, progressBound(elapsed))
	}
	s := stdout.String()
	if !strings.HasPrefix(s, "line-1\n") || !strings.HasSuffix(s, "last-line\n") {
		t.Fatalf("notifications carried %.200s ... %s", s, s[max(0, len(s)-200):])
	}
	checkOrdered(t, s)
}
