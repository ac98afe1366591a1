package toolctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/eventsig"
)

// SessionNode is one call of a session as `toolctl session` shows it: its
// outcome, a one-line summary of its output (for a task call, the
// sub-agent's answer and what its calls did), and the calls made for it
// (a task's sub-agent's calls).
type SessionNode struct {
	CallID       string                 `json:"call_id"`
	Agent        string                 `json:"agent"`
	Tool         string                 `json:"tool"`
	Status       events.Status          `json:"status"`
	DurationMS   int64                  `json:"duration_ms"`
	Time         time.Time              `json:"time"`
	ParentCallID string                 `json:"parent_call_id,omitempty"`
	Cached       bool                   `json:"cached,omitempty"`
	Summary      string                 `json:"summary,omitempty"`
	Task         *events.TaskResultData `json:"task,omitempty"`
	Children     []*SessionNode         `json:"children,omitempty"`
}

// cmdSession prints a session's calls as a tree: each task call with the
// calls its sub-agent made for it below it.
func cmdSession(ctx context.Context, env *Env, args []string) int {
	fs := env.flagSet("session", "usage: toolctl session [--since D] [--json] SESSION_ID")
	since := fs.Duration("since", 24*time.Hour, "look at calls finished this long ago at most")
	asJSON := fs.Bool("json", false, "print the tree as JSON")
	words, code, ok := parseWords(fs, args, 1, 1)
	if !ok {
		return code
	}
	if words[0] == "" {
		fs.Usage()
		return ExitUsage
	}
	id := words[0]
	nc, js, code := env.jetStream()
	if js == nil {
		return code
	}
	defer nc.Close()
	cons, code := env.auditConsumer(ctx, js, events.SubjectAudit, *since)
	if cons == nil {
		return code
	}
	verify, err := env.auditVerifier()
	if err != nil {
		return env.fail(ExitUsage, "%v", err)
	}
	var execs []events.AuditData
	keep := func(m jetstream.Msg) {
		// Only what a trusted worker signed joins the tree.
		if _, a, err := verify.Audit(m.Subject(), m.Headers(), m.Data()); err == nil && a.Kind == events.AuditExecution {
			execs = append(execs, *a)
		}
	}
	if err := drain(ctx, cons, false, keep, keep, func() {}); err != nil && !errors.Is(err, context.Canceled) {
		return env.fail(ExitNoReach, "%v", err)
	}
	roots := SessionTree(id, execs)
	if len(roots) == 0 {
		return env.fail(ExitFailed, "no calls of session %q finished in the last %s", id, *since)
	}
	results, err := js.Stream(ctx, bus.StreamResults)
	if err == nil {
		summarize(ctx, results, verify, roots)
	}
	if *asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(roots)
		return ExitOK
	}
	FormatSession(env.Stdout, id, roots)
	return ExitOK
}

// SessionTree builds the call tree of session id from execution audit
// events: the session's calls, and the calls made for any of them (a
// sub-agent's calls name their task call as parent; they carry the
// parent's session when made through pkg/client, and are found by their
// parent even when not). Roots and children are in time order; a call
// whose parent is not in the tree is a root.
func SessionTree(id string, execs []events.AuditData) []*SessionNode {
	nodes := map[string]*SessionNode{} // by agent/call id
	byCall := map[string][]*SessionNode{}
	add := func(a events.AuditData) {
		k := a.Agent + "/" + a.CallID
		if _, ok := nodes[k]; ok {
			return
		}
		n := &SessionNode{CallID: a.CallID, Agent: a.Agent, Tool: a.Tool, Status: a.Status, DurationMS: a.DurationMS,
			Time: a.Time, ParentCallID: a.ParentCallID, Cached: a.Cached}
		nodes[k] = n
		byCall[a.CallID] = append(byCall[a.CallID], n)
	}
	for _, a := range execs {
		if a.SessionID == id {
			add(a)
		}
	}
	// Calls made for a call of the tree join it, to any depth.
	for grew := true; grew; {
		grew = false
		for _, a := range execs {
			if _, in := nodes[a.Agent+"/"+a.CallID]; in || a.ParentCallID == "" {
				continue
			}
			if len(byCall[a.ParentCallID]) > 0 {
				add(a)
				grew = true
			}
		}
	}
	var roots []*SessionNode
	for _, n := range nodes {
		parent := parentOf(n, byCall[n.ParentCallID])
		if parent == nil {
			roots = append(roots, n)
			continue
		}
		parent.Children = append(parent.Children, n)
	}
	sortNodes(roots)
	return roots
}

// parentOf picks n's parent among the calls of its parent call id: the
// task call (another agent's call of the task tool) when there is one.
func parentOf(n *SessionNode, cands []*SessionNode) *SessionNode {
	var any *SessionNode
	for _, c := range cands {
		if c == n {
			continue
		}
		if c.Tool == "task" && c.Agent != n.Agent {
			return c
		}
		any = c
	}
	return any
}

func sortNodes(ns []*SessionNode) {
	sort.SliceStable(ns, func(i, j int) bool {
		if !ns[i].Time.Equal(ns[j].Time) {
			return ns[i].Time.Before(ns[j].Time)
		}
		return ns[i].CallID < ns[j].CallID
	})
	for _, n := range ns {
		sortNodes(n.Children)
	}
}

// summarize fills each node's summary from its stored result.
func summarize(ctx context.Context, results jetstream.Stream, verify *eventsig.Verifier, ns []*SessionNode) {
	for _, n := range ns {
		if events.ValidToken(n.Agent) == nil && events.ValidToken(n.CallID) == nil {
			if raw, err := results.GetLastMsgForSubject(ctx, events.ResultSubject(n.Agent, n.CallID)); err == nil {
				if r, err := verify.Result(raw.Header, raw.Data, n.Agent, n.CallID, ""); err == nil {
					n.Summary = firstLine(r.Output, 100)
					if t, ok := taskOf(*r); ok {
						n.Task = &t
						n.Summary = firstLine(t.Summary, 100)
					}
				}
			}
		}
		summarize(ctx, results, verify, n.Children)
	}
}

func taskOf(r events.ResultData) (events.TaskResultData, bool) {
	var t events.TaskResultData
	v, ok := r.Metadata["task"]
	if !ok {
		return t, false
	}
	b, err := json.Marshal(v)
	if err != nil || json.Unmarshal(b, &t) != nil || t.TaskID == "" {
		return t, false
	}
	return t, true
}

func firstLine(s string, max int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if r := []rune(s); len(r) > max {
		s = string(r[:max]) + "…"
	}
	return s
}

// FormatSession writes the tree of session id, one call per line: agent,
// tool, call id, status, duration, summary; a task call also says how
// many calls its sub-agent made and the files they changed.
func FormatSession(w io.Writer, id string, roots []*SessionNode) {
	count, tasks := 0, 0
	var walk func([]*SessionNode)
	walk = func(ns []*SessionNode) {
		for _, n := range ns {
			count++
			if n.Tool == "task" {
				tasks++
			}
			walk(n.Children)
		}
	}
	walk(roots)
	fmt.Fprintf(w, "session %s: %d %s, %d %s\n", id, count, plural(count, "call", "calls"), tasks, plural(tasks, "task", "tasks"))
	var line func(n *SessionNode, prefix, branch, indent string)
	line = func(n *SessionNode, prefix, branch, indent string) {
		fmt.Fprintf(w, "%s%s%s/%s %s  %s  %dms", prefix, branch, n.Agent, n.Tool, n.CallID, n.Status, n.DurationMS)
		if n.Cached {
			fmt.Fprint(w, "  cached")
		}
		if t := n.Task; t != nil {
			fmt.Fprintf(w, "  [%s: %d tool %s", t.Status, t.ToolCallCount, plural(t.ToolCallCount, "call", "calls"))
			if len(t.FilesModified) > 0 {
				fmt.Fprintf(w, ", modified %s", strings.Join(t.FilesModified, ", "))
			}
			if len(t.Errors) > 0 {
				fmt.Fprintf(w, ", %d %s", len(t.Errors), plural(len(t.Errors), "error", "errors"))
			}
			fmt.Fprint(w, "]")
		}
		if n.Summary != "" {
			fmt.Fprintf(w, "  %s", n.Summary)
		}
		fmt.Fprintln(w)
		for i, c := range n.Children {
			b, in := "├─ ", "│  "
			if i == len(n.Children)-1 {
				b, in = "└─ ", "   "
			}
			line(c, prefix+indent, b, in)
		}
	}
	for _, r := range roots {
		line(r, "", "", "")
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
