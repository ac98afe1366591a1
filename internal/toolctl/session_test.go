package toolctl

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/pkg/events"
)

func exec(agent, id, tool, session, parent string, at int, status events.Status) events.AuditData {
	return events.AuditData{Kind: events.AuditExecution, Agent: agent, CallID: id, Tool: tool, SessionID: session,
		ParentCallID: parent, Status: status, DurationMS: int64(10 * at),
		Time: time.Date(2026, 1, 2, 3, 4, at, 0, time.UTC)}
}

// The tree of a session: a task call with its sub-agent's calls (one of
// them from a session of its own, found by its parent), a nested task,
// and calls of other sessions left out.
func TestSessionTree(t *testing.T) {
	execs := []events.AuditData{
		exec("lead", "t1", "task", "s1", "", 9, events.StatusOK),
		exec("lead", "r0", "read", "s1", "", 1, events.StatusOK),
		exec("helper", "h1", "read", "s1", "t1", 2, events.StatusOK),
		exec("helper", "h2", "edit", "other", "t1", 3, events.StatusDenied),
		exec("helper", "t2", "task", "s1", "t1", 7, events.StatusOK),
		exec("deep", "d1", "grep", "s1", "t2", 5, events.StatusOK),
		exec("lead", "x1", "read", "s2", "", 4, events.StatusOK),
		exec("stray", "y1", "read", "s3", "nope", 4, events.StatusOK),
	}
	execs[1].Cached = true
	roots := SessionTree("s1", execs)
	for _, n := range roots {
		if n.CallID == "t1" {
			n.Summary = "replaced beta with gamma"
			n.Task = &events.TaskResultData{TaskID: "t1", Status: "ok", ToolCallCount: 3, FilesModified: []string{"notes.txt"}, Errors: []string{"edit denied"}}
		}
	}
	var b bytes.Buffer
	FormatSession(&b, "s1", roots)
	golden := filepath.Join("testdata", "session.golden")
	if *updateGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test ./internal/toolctl -run TestSessionTree -update)", err)
	}
	if b.String() != string(want) {
		t.Errorf("session tree:\n%s\nwant:\n%s", b.String(), want)
	}
	if strings.Contains(b.String(), "x1") || strings.Contains(b.String(), "y1") {
		t.Errorf("calls of other sessions shown:\n%s", b.String())
	}
}

func TestSessionTreeEmpty(t *testing.T) {
	if roots := SessionTree("none", []events.AuditData{exec("a", "c", "read", "s", "", 1, events.StatusOK)}); len(roots) != 0 {
		t.Errorf("roots %v", roots)
	}
}
