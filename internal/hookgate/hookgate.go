// Package hookgate judges the tool calls of agents that run their own
// tools (Claude Code, Codex) with toolgate's policy, through their
// PreToolUse hooks: the agent's Bash, Read, Write, Edit, apply_patch, MCP
// tools... are mapped to toolgate's tools and judged by the same gate; an
// ask goes to people through the approver (a judge-only call of the mapped
// toolgate tool, approved as any call, never run by the worker) and the
// hook waits for their decision. Both agents send the same hook JSON
// (tool_name and tool_input); Claude Code takes
// hookSpecificOutput.permissionDecision allow, deny or ask with a reason,
// Codex a narrower answer (Codex).
package hookgate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tooldef"
)

// Input is a PreToolUse hook payload (the fields toolgate reads).
type Input struct {
	SessionID     string          `json:"session_id"`
	Cwd           string          `json:"cwd"`
	HookEventName string          `json:"hook_event_name"`
	ToolName      string          `json:"tool_name"`
	ToolInput     json.RawMessage `json:"tool_input"`
	ToolUseID     string          `json:"tool_use_id"`
}

// Output is a PreToolUse hook answer. An empty HookSpecificOutput (no
// decision) leaves the call to the agent's own permission flow.
type Output struct {
	HookSpecificOutput *Specific `json:"hookSpecificOutput,omitempty"`
}

// Specific is the PreToolUse decision.
type Specific struct {
	HookEventName            string `json:"hookEventName"`
	PermissionDecision       string `json:"permissionDecision"`
	PermissionDecisionReason string `json:"permissionDecisionReason,omitempty"`
}

// Asker asks people whether a call may run and waits for the answer:
// reqs are the mapped requests the gate asked about, question says it in
// words.
type Asker interface {
	Ask(ctx context.Context, reqs []policy.Request, question string, timeout time.Duration) (allow bool, why string, err error)
}

// Judge decides hook calls for one agent.
type Judge struct {
	// Gate judges the mapped calls. Required.
	Gate policy.Evaluator
	// Agent is the agent id the policy judges the calls as.
	Agent string
	// Asker, when set, takes an ask to people and waits; without one an
	// ask is answered "ask" and the agent asks its user.
	Asker Asker
	// AskTimeout bounds how long people have; default 10 minutes.
	AskTimeout time.Duration
}

// ErrBadInput reports a hook payload that cannot be judged.
var ErrBadInput = errors.New("bad hook input")

// Decide judges one hook payload. Tools toolgate does not map (the
// agent's own bookkeeping: TodoWrite, Task, ...) get no decision. Any
// failure to judge is a deny.
func (j *Judge) Decide(ctx context.Context, in Input) Output {
	if in.HookEventName != "" && in.HookEventName != "PreToolUse" {
		return Output{}
	}
	reqs, err := Map(in)
	if err != nil {
		return decision(policy.Deny, "toolgate: "+err.Error())
	}
	if reqs == nil {
		return Output{}
	}
	// The strictest verdict over every part of the call wins.
	worst := policy.Decision{Action: policy.Allow}
	var asked []policy.Request
	for _, r := range reqs {
		r.Agent = j.Agent
		if r.Workspace == "" {
			r.Workspace = in.Cwd
		}
		d := j.Gate.Evaluate(ctx, r)
		if d.Action == policy.Ask {
			asked = append(asked, r)
		}
		if d.Action.Rank() > worst.Action.Rank() || worst.Reason == "" {
			worst = d
		}
	}
	switch worst.Action {
	case policy.Allow:
		return decision(policy.Allow, "toolgate: "+worst.Reason)
	case policy.Ask:
		if j.Asker == nil {
			return decision(policy.Ask, "toolgate asks: "+worst.Reason)
		}
		timeout := j.AskTimeout
		if worst.ApprovalTimeout > 0 {
			timeout = worst.ApprovalTimeout
		}
		if timeout <= 0 {
			timeout = 10 * time.Minute
		}
		ok, why, err := j.Asker.Ask(ctx, asked, question(j.Agent, in, worst), timeout)
		switch {
		case err != nil:
			return decision(policy.Deny, "toolgate: could not ask people ("+err.Error()+"); denied")
		case ok:
			return decision(policy.Allow, "toolgate: approved by "+why)
		default:
			return decision(policy.Deny, "toolgate: not approved: "+why)
		}
	default:
		return decision(policy.Deny, "toolgate denies: "+worst.Reason)
	}
}

// Codex turns an answer into the one Codex's PreToolUse output parser
// accepts (openai/codex, codex-rs/hooks): it refuses
// permissionDecision "allow" without updatedInput, refuses "ask"
// outright, and wants a non-empty reason with "deny". So an allow, and
// no decision, are the empty object (Codex goes on with its own
// approval flow), a deny keeps its reason, and an ask, which only
// reaches here when no person can be asked (--no-ask), is a deny that
// says so: failing open is not an option. With an Asker, Decide has
// already turned every ask into the people's allow or deny.
func Codex(out Output) Output {
	s := out.HookSpecificOutput
	if s == nil {
		return Output{}
	}
	switch policy.Action(s.PermissionDecision) {
	case policy.Allow:
		return Output{}
	case policy.Ask:
		return decision(policy.Deny, s.PermissionDecisionReason+
			" (Codex's hooks cannot ask; run toolctl hook codex without --no-ask so that a person decides in the approver)")
	default:
		reason := strings.TrimSpace(s.PermissionDecisionReason)
		if reason == "" {
			reason = "toolgate denies"
		}
		return decision(policy.Deny, reason)
	}
}

func decision(a policy.Action, reason string) Output {
	return Output{HookSpecificOutput: &Specific{HookEventName: "PreToolUse", PermissionDecision: string(a), PermissionDecisionReason: reason}}
}

// question is what people see for an asked call.
func question(agent string, in Input, d policy.Decision) string {
	detail := string(in.ToolInput)
	if r := []rune(detail); len(r) > 2000 {
		detail = string(r[:2000]) + "…"
	}
	return fmt.Sprintf("Agent %s wants to run its %s tool in %s:\n%s\n\nThe policy asks: %s (rule %s). Allow it?",
		agent, in.ToolName, in.Cwd, detail, d.Reason, d.Rule)
}

// Map turns a hook payload into the requests the gate judges: one per
// file a call touches, one for a command. It returns nil for tools that
// are not mapped, and an error for input that cannot be read (which the
// caller denies).
func Map(in Input) ([]policy.Request, error) {
	var args map[string]any
	if len(in.ToolInput) > 0 {
		d := json.NewDecoder(strings.NewReader(string(in.ToolInput)))
		d.UseNumber()
		if err := d.Decode(&args); err != nil {
			return nil, fmt.Errorf("%w: tool_input of %s is not a JSON object: %v", ErrBadInput, in.ToolName, err)
		}
	}
	str := func(k string) string { s, _ := args[k].(string); return s }
	req := func(tool string, kind policy.Kind, a map[string]any) policy.Request {
		return policy.Request{Tool: tool, Known: true, Kind: kind, Arguments: a}
	}
	needs := func(k string) error {
		if str(k) == "" {
			return fmt.Errorf("%w: %s without %s", ErrBadInput, in.ToolName, k)
		}
		return nil
	}
	switch in.ToolName {
	case "Bash", "exec_command", "shell":
		if err := needs("command"); err != nil {
			return nil, err
		}
		return []policy.Request{call(tooldef.Bash, role{tooldef.Command: str("command")})}, nil
	case "Read":
		if err := needs("file_path"); err != nil {
			return nil, err
		}
		return []policy.Request{call(tooldef.Read, role{tooldef.Path: str("file_path")})}, nil
	case "Write":
		if err := needs("file_path"); err != nil {
			return nil, err
		}
		return []policy.Request{call(tooldef.Write, role{tooldef.Path: str("file_path"), tooldef.Content: str("content")})}, nil
	case "Edit":
		if err := needs("file_path"); err != nil {
			return nil, err
		}
		return []policy.Request{call(tooldef.Edit, role{tooldef.Path: str("file_path"),
			tooldef.OldText: str("old_string"), tooldef.NewText: str("new_string")})}, nil
	case "MultiEdit":
		// {file_path, edits: [{old_string, new_string, replace_all}]}:
		// every edit is judged, as an edit of the file.
		if err := needs("file_path"); err != nil {
			return nil, err
		}
		return multiEdit(in.ToolName, str("file_path"), args["edits"])
	case "PowerShell":
		// Not bash: its syntax is not shell syntax, so its command is not
		// parsed and no command classification can allow it. It is judged
		// by name and kind (execute): a rule for PowerShell, the execute
		// kind's rule, else the policy's default.
		if err := needs("command"); err != nil {
			return nil, err
		}
		return []policy.Request{req(in.ToolName, policy.KindExecute, map[string]any{"command": str("command")})}, nil
	case "NotebookEdit":
		if err := needs("notebook_path"); err != nil {
			return nil, err
		}
		return []policy.Request{call(tooldef.Edit, role{tooldef.Path: str("notebook_path")})}, nil
	case "Glob":
		return []policy.Request{call(tooldef.Glob, role{tooldef.PathPattern: str("pattern"), tooldef.Path: str("path")})}, nil
	case "Grep":
		return []policy.Request{call(tooldef.Grep, role{tooldef.Pattern: str("pattern"), tooldef.Path: str("path")})}, nil
	case "LS":
		return []policy.Request{call(tooldef.Ls, role{tooldef.Path: str("path")})}, nil
	case "WebFetch", "WebSearch":
		return []policy.Request{req(in.ToolName, policy.KindNetwork, args)}, nil
	case "apply_patch":
		if err := needs("command"); err != nil {
			return nil, err
		}
		files, err := PatchFiles(str("command"))
		if err != nil {
			return nil, err
		}
		var out []policy.Request
		for _, f := range files {
			out = append(out, call(tooldef.Write, role{tooldef.Path: f, tooldef.Content: ""}))
		}
		return out, nil
	}
	if strings.HasPrefix(in.ToolName, "mcp__") {
		// The agent's own MCP tools: judged by name; their kind is unknown
		// to toolgate, so execute, the conservative one.
		return []policy.Request{req(in.ToolName, policy.KindExecute, args)}, nil
	}
	return nil, nil
}

// multiEdit maps a MultiEdit's edits, one request each; a MultiEdit
// without edits, or with one that is not an object of strings, cannot be
// judged.
func multiEdit(tool, path string, edits any) ([]policy.Request, error) {
	list, ok := edits.([]any)
	if !ok || len(list) == 0 {
		return nil, fmt.Errorf("%w: %s without edits", ErrBadInput, tool)
	}
	out := make([]policy.Request, 0, len(list))
	for i, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%w: %s edits[%d] is not an object", ErrBadInput, tool, i)
		}
		oldText, ok1 := m["old_string"].(string)
		newText, ok2 := m["new_string"].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w: %s edits[%d] wants old_string and new_string strings", ErrBadInput, tool, i)
		}
		out = append(out, call(tooldef.Edit, role{tooldef.Path: path, tooldef.OldText: oldText, tooldef.NewText: newText}))
	}
	return out, nil
}

// role gives the values of a built-in tool's arguments by what they stand
// for; the tool's definition names them.
type role map[tooldef.Role]string

// call is a request for the built-in tool d with the arguments of args,
// named as d names them. An empty value of an optional argument is left
// out.
func call(d *tooldef.Def, args role) policy.Request {
	m := make(map[string]any, len(args))
	for r, v := range args {
		a := d.Arg(r)
		if a == nil {
			panic("hookgate: tool " + d.Name + " has no argument for " + string(r))
		}
		if v != "" || a.Required {
			m[a.Name] = v
		}
	}
	return policy.Request{Tool: d.Name, Known: true, Kind: policy.Kind(d.Kind), Arguments: m}
}

// PatchFiles returns the files an apply_patch patch adds, updates, deletes
// or moves to. A patch naming no file is an error: it cannot be judged.
func PatchFiles(patch string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, line := range strings.Split(patch, "\n") {
		line = strings.TrimRight(line, "\r")
		for _, p := range []string{"*** Add File: ", "*** Update File: ", "*** Delete File: ", "*** Move to: "} {
			if f, ok := strings.CutPrefix(line, p); ok {
				f = strings.TrimSpace(f)
				if f == "" {
					return nil, fmt.Errorf("%w: apply_patch line %q names no file", ErrBadInput, line)
				}
				f = filepath.Clean(f)
				if !seen[f] {
					seen[f] = true
					out = append(out, f)
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: apply_patch names no file", ErrBadInput)
	}
	return out, nil
}
