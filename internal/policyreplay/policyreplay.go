// Package policyreplay judges the calls of an audit trail again under
// another policy and says what would change: toolctl policy replay. It
// reads audit events already verified (signatures and chains; see
// internal/auditchain) and knows nothing of the bus.
package policyreplay

import (
	"context"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/policy"
)

// Options select the audited calls replayed.
type Options struct {
	// Since and Until bound the time of the gate's decision (zero: no
	// bound); Until is exclusive.
	Since, Until time.Time
	// Agent, when set, is a glob (path.Match) the agent must match.
	Agent string
	// Tool, when set, is the canonical tool name.
	Tool string
}

// Verdict is one decision on a call.
type Verdict struct {
	Action string `json:"action"`
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
}

// Change is a call whose action would change.
type Change struct {
	CallID string    `json:"call_id"`
	Agent  string    `json:"agent"`
	Tool   string    `json:"tool"`
	Time   time.Time `json:"time"`
	// Input is what the gate judged: the command, the path or the host.
	Input  string  `json:"input"`
	Before Verdict `json:"before"`
	After  Verdict `json:"after"`
}

// Transitions are the changes of action counted, in the order printed.
var Transitions = []string{"allow→ask", "allow→deny", "ask→allow", "ask→deny", "deny→allow", "deny→ask"}

// Summary counts the replay's calls.
type Summary struct {
	// Policy and Revision name the policy the calls were judged under.
	Policy   string `json:"policy"`
	Revision string `json:"revision"`
	// Since and Until are the window (Until zero: now).
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	// Calls are the audited gate decisions in the window; Judged those
	// judged again, Unchanged those whose action stays, NotReplayable
	// those audited without the gate's view (before it existed, or with a
	// secret removed from it), which are never judged on a guess.
	Calls         int `json:"calls"`
	Judged        int `json:"judged"`
	Unchanged     int `json:"unchanged"`
	NotReplayable int `json:"not_replayable"`
	// Changes counts the changed calls by transition (Transitions).
	Changes map[string]int `json:"changes"`
}

// Changed is how many calls would change.
func (s Summary) Changed() int { return s.Judged - s.Unchanged }

// Result is a replay's outcome.
type Result struct {
	Summary Summary
	// Changes are the changed calls, oldest first.
	Changes []Change
}

// Replayer judges audited calls again; Add them in any order, then read
// Result. It is not safe for concurrent use.
type Replayer struct {
	gate    *policy.Gate
	opts    Options
	seen    map[string]bool
	sum     Summary
	changes []Change
}

// New returns a replayer judging under p.
func New(p *policy.Policy, o Options) *Replayer {
	sum := Summary{Policy: p.Source(), Revision: p.Revision(), Since: o.Since, Until: o.Until, Changes: map[string]int{}}
	for _, t := range Transitions {
		sum.Changes[t] = 0
	}
	return &Replayer{gate: policy.NewGate(p), opts: o, seen: map[string]bool{}, sum: sum}
}

// GateDecision reports whether a carries the policy gate's own judgement
// of a call (not people's decision, not a resumed call's second
// judgement), and when it was made.
func GateDecision(a *events.AuditData) (time.Time, bool) {
	if a.Decision == nil || len(a.DecidedBy) != 1 || a.DecidedBy[0] != "policy" || a.Resumed {
		return time.Time{}, false
	}
	if a.Kind == events.AuditExecution && !a.DecidedAt.IsZero() {
		return a.DecidedAt, true
	}
	return a.Time, true
}

// Add judges the call a records again when it is a gate decision in the
// window; each call counts once (its first gate decision).
func (r *Replayer) Add(ctx context.Context, a *events.AuditData) {
	at, ok := GateDecision(a)
	if !ok || !r.inWindow(at) || (r.opts.Tool != "" && a.Tool != r.opts.Tool) {
		return
	}
	if r.opts.Agent != "" {
		if m, _ := path.Match(r.opts.Agent, a.Agent); !m {
			return
		}
	}
	key := a.Agent + "\x00" + a.CallID
	if r.seen[key] {
		return
	}
	r.seen[key] = true
	r.sum.Calls++
	j := a.Judged
	if j == nil || j.Redacted {
		r.sum.NotReplayable++
		return
	}
	now := r.gate.Rejudge(ctx, a.Agent, a.Tool, viewOf(j))
	r.sum.Judged++
	if string(now.Action) == a.Decision.Action {
		r.sum.Unchanged++
		return
	}
	r.sum.Changes[a.Decision.Action+"→"+string(now.Action)]++
	r.changes = append(r.changes, Change{CallID: a.CallID, Agent: a.Agent, Tool: a.Tool, Time: at.UTC(), Input: Input(j),
		Before: Verdict{Action: a.Decision.Action, Rule: a.Decision.Rule, Reason: a.Decision.Reason},
		After:  Verdict{Action: string(now.Action), Rule: now.Rule, Reason: now.Reason}})
}

func (r *Replayer) inWindow(t time.Time) bool {
	return (r.opts.Since.IsZero() || !t.Before(r.opts.Since)) && (r.opts.Until.IsZero() || t.Before(r.opts.Until))
}

// Result returns the summary and the changed calls, oldest first.
func (r *Replayer) Result() Result {
	ch := append([]Change(nil), r.changes...)
	sort.SliceStable(ch, func(i, j int) bool { return ch[i].Time.Before(ch[j].Time) })
	sum := r.sum
	sum.Changes = make(map[string]int, len(r.sum.Changes))
	for k, v := range r.sum.Changes {
		sum.Changes[k] = v
	}
	return Result{Summary: sum, Changes: ch}
}

// viewOf is the gate's view as the audit recorded it.
func viewOf(j *events.Judged) *policy.Judged {
	return &policy.Judged{Workspace: j.Workspace, Kind: policy.Kind(j.Kind), Unknown: j.Unknown, Command: j.Command,
		Workdir: j.Workdir, Path: j.Path, Pattern: j.Pattern, Hosts: j.Hosts, Links: j.Links}
}

// Input is what the gate judged of a call, for a person: the command,
// the path (and pattern) or the hosts.
func Input(j *events.Judged) string {
	switch {
	case j.Command != "":
		if j.Workdir != "" {
			return j.Command + " (in " + j.Workdir + ")"
		}
		return j.Command
	case j.Path != "" || j.Pattern != "":
		return strings.TrimSpace(j.Path + " " + j.Pattern)
	case len(j.Hosts) > 0:
		return strings.Join(j.Hosts, " ")
	}
	return ""
}
