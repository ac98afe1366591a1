package hooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/hooks"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/builtin"
)

// writePolicy allows writes except to *.pem files, and asks about
// anything under review/.
const writePolicy = `
tools:
  default: allow
  write:
    action: allow
    constraints:
      denied_paths: ["**/*.pem"]
`

// rig is a real pipeline: the built-in tools over a temp workspace, the
// gate with a real policy, and the hooks under test.
type rig struct {
	ws   string
	pipe *tools.Pipeline
	ran  *atomic.Int64 // executions of the counting tool
}

func newRig(t testing.TB, chain *hooks.Chain) *rig {
	t.Helper()
	ws := t.TempDir()
	reg := tools.NewRegistry()
	if err := builtin.Register(reg, builtin.Config{Workspace: ws}); err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int64
	reg.MustRegister(&tools.Tool{Name: "echo", Kind: policy.KindOther,
		Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","maxLength":20}},"required":["text"],"additionalProperties":false}`),
		Handler: tools.HandlerFunc(func(_ context.Context, c *tools.Call) (*tools.Output, error) {
			ran.Add(1)
			return &tools.Output{Content: c.Args["text"].(string)}, nil
		})})
	pol, _, err := policy.Parse([]byte(writePolicy), "test")
	if err != nil {
		t.Fatal(err)
	}
	pipe := tools.NewPipeline(reg, tools.WithGate(policy.NewGate(pol)), tools.WithWorkspace(ws),
		tools.WithHooks(chain.Before(), chain.After()))
	return &rig{ws: ws, pipe: pipe, ran: &ran}
}

func (r *rig) call(t *testing.T, c *tools.Call) (*tools.Output, error) {
	t.Helper()
	if c.ID == "" {
		c.ID = "c1"
	}
	if c.Agent == "" {
		c.Agent = "agent-7"
	}
	return r.pipe.Handle(context.Background(), c)
}

func mustChain(t *testing.T, hs []hooks.Hook, redact bool) *hooks.Chain {
	t.Helper()
	o := hooks.Options{}
	if redact {
		r, err := hooks.NewRedactor(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		o.Redactor = r
	}
	ch, err := hooks.New(hs, o)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func setArg(key, value string) hooks.BeforeFunc {
	return func(_ context.Context, c *hooks.Call) (hooks.Verdict, error) {
		var m map[string]any
		_ = json.Unmarshal(c.Arguments, &m)
		m[key] = value
		b, _ := json.Marshal(m)
		return hooks.Verdict{Action: hooks.Modify, Arguments: b}, nil
	}
}

// TestBeforeHookCannotGetAroundDeny: an in-process hook that changes a
// write's path to one the policy denies gets the call denied, and nothing
// is written, neither where the agent asked nor where the hook pointed.
func TestBeforeHookCannotGetAroundDeny(t *testing.T) {
	r := newRig(t, mustChain(t, []hooks.Hook{{Name: "retarget", Before: setArg("path", "id.pem"), Tools: []string{"write"}}}, true))
	c := &tools.Call{Name: "write", Arguments: json.RawMessage(`{"path":"notes.txt","content":"hello"}`)}
	_, err := r.call(t, c)
	var pe *tools.PolicyError
	if !errors.As(err, &pe) || !errors.Is(err, tools.ErrDenied) {
		t.Fatalf("err = %v, want a deny", err)
	}
	for _, f := range []string{"notes.txt", "id.pem"} {
		if _, err := os.Stat(filepath.Join(r.ws, f)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s was written (stat: %v)", f, err)
		}
	}
	if len(c.Hooks) != 1 || c.Hooks[0].Hook != "retarget" || c.Hooks[0].ArgsSHA256Before == c.Hooks[0].ArgsSHA256After {
		t.Fatalf("hook record: %+v", c.Hooks)
	}
	if !strings.Contains(pe.Decision.Rule, "denied_paths") {
		t.Fatalf("denied by %q, want the policy's denied_paths", pe.Decision.Rule)
	}

	// The same hook on an allowed path: the file is written where the
	// hook said, with the content validated.
	r2 := newRig(t, mustChain(t, []hooks.Hook{{Name: "retarget", Before: setArg("path", "moved.txt")}}, true))
	out, err := r2.call(t, &tools.Call{Name: "write", Arguments: json.RawMessage(`{"path":"notes.txt","content":"hello"}`)})
	if err != nil || out.IsError {
		t.Fatalf("write: %v %+v", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(r2.ws, "moved.txt")); err != nil || string(b) != "hello" {
		t.Fatalf("moved.txt: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(r2.ws, "notes.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("notes.txt was written though the hook moved the call")
	}
}

// TestBeforeHookArgumentsAreValidatedAgain: arguments a hook changes
// against the schema stop the call before the gate and the tool.
func TestBeforeHookArgumentsAreValidatedAgain(t *testing.T) {
	r := newRig(t, mustChain(t, []hooks.Hook{{Name: "lengthen", Before: setArg("text", strings.Repeat("x", 50))}}, true))
	_, err := r.call(t, &tools.Call{Name: "echo", Arguments: json.RawMessage(`{"text":"hi"}`)})
	var ae *tools.ArgumentError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "as hooks changed them") {
		t.Fatalf("err = %v, want invalid arguments naming the hooks", err)
	}
	if r.ran.Load() != 0 {
		t.Fatal("the tool ran")
	}
}

func TestBeforeHookVerdicts(t *testing.T) {
	deny := hooks.BeforeFunc(func(context.Context, *hooks.Call) (hooks.Verdict, error) {
		return hooks.Verdict{Action: hooks.Deny, Reason: "not on fridays"}, nil
	})
	failing := hooks.BeforeFunc(func(context.Context, *hooks.Call) (hooks.Verdict, error) {
		return hooks.Verdict{}, errors.New("backend down")
	})
	panicking := hooks.BeforeFunc(func(context.Context, *hooks.Call) (hooks.Verdict, error) { panic("boom") })
	slow := hooks.BeforeFunc(func(ctx context.Context, _ *hooks.Call) (hooks.Verdict, error) {
		<-ctx.Done()
		return hooks.Verdict{}, ctx.Err()
	})
	nonsense := hooks.BeforeFunc(func(context.Context, *hooks.Call) (hooks.Verdict, error) {
		return hooks.Verdict{Action: "maybe"}, nil
	})
	notObject := hooks.BeforeFunc(func(context.Context, *hooks.Call) (hooks.Verdict, error) {
		return hooks.Verdict{Action: hooks.Modify, Arguments: json.RawMessage(`[1]`)}, nil
	})
	for _, c := range []struct {
		name     string
		hook     hooks.Hook
		approved bool
		denied   string // part of the reason; empty: the call runs
		out      string
	}{
		{"pass", hooks.Hook{Before: hooks.BeforeFunc(func(context.Context, *hooks.Call) (hooks.Verdict, error) {
			return hooks.Verdict{Action: hooks.Pass}, nil
		})}, false, "", "hi"},
		{"modify", hooks.Hook{Before: setArg("text", "changed")}, false, "", "changed"},
		{"deny", hooks.Hook{Before: deny}, false, "denied by hook h: not on fridays", ""},
		{"error fails closed", hooks.Hook{Before: failing}, false, "hook h failed, the call is refused (fail closed): backend down", ""},
		{"panic fails closed", hooks.Hook{Before: panicking}, false, "h panicked: boom", ""},
		{"timeout fails closed", hooks.Hook{Before: slow, Timeout: 50 * time.Millisecond}, false, "h did not answer within 50ms", ""},
		{"nonsense fails closed", hooks.Hook{Before: nonsense}, false, `action "maybe" is not pass, modify or deny`, ""},
		{"arguments not an object", hooks.Hook{Before: notObject}, false, "modify without a JSON object", ""},
		{"error fail open", hooks.Hook{Before: failing, FailOpen: true}, false, "", "hi"},
		{"other tool", hooks.Hook{Before: deny, Tools: []string{"write"}}, false, "", "hi"},
		{"approved call changed", hooks.Hook{Before: setArg("text", "changed")}, true, "changed the arguments of a call people approved", ""},
		{"approved call unchanged", hooks.Hook{Before: setArg("text", "hi")}, true, "", "hi"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.hook.Name = "h"
			ch := mustChain(t, []hooks.Hook{c.hook}, true)
			r := newRig(t, ch)
			out, err := r.call(t, &tools.Call{Name: "echo", Arguments: json.RawMessage(`{"text":"hi"}`), Approved: c.approved})
			if c.denied != "" {
				var pe *tools.PolicyError
				if !errors.As(err, &pe) || pe.Decision.Rule != "hook.h" || !strings.Contains(pe.Decision.Reason, c.denied) {
					t.Fatalf("err = %v, want a deny by hook.h saying %q", err, c.denied)
				}
				if r.ran.Load() != 0 {
					t.Fatal("the tool ran")
				}
				return
			}
			if err != nil || out.Content != c.out {
				t.Fatalf("out %+v err %v, want %q", out, err, c.out)
			}
		})
	}
}

// TestHooksRunInOrder: each before hook sees the arguments as the hooks
// before it left them, each after hook the output as the ones before it
// left it; the records say who changed what, in order.
func TestHooksRunInOrder(t *testing.T) {
	appendArg := func(s string) hooks.BeforeFunc {
		return func(_ context.Context, c *hooks.Call) (hooks.Verdict, error) {
			var m map[string]string
			_ = json.Unmarshal(c.Arguments, &m)
			m["text"] += s
			b, _ := json.Marshal(m)
			return hooks.Verdict{Action: hooks.Modify, Arguments: b}, nil
		}
	}
	appendOut := func(s string) hooks.AfterFunc {
		return func(_ context.Context, _ *hooks.Call, out hooks.Output) (string, error) { return out.Content + s, nil }
	}
	ch := mustChain(t, []hooks.Hook{
		{Name: "one", Before: appendArg("1")}, {Name: "two", Before: appendArg("2")},
		{Name: "a", After: appendOut("a")}, {Name: "b", After: appendOut("b")}, {Name: "three", Before: appendArg("3")},
	}, true)
	r := newRig(t, ch)
	c := &tools.Call{Name: "echo", Arguments: json.RawMessage(`{"text":"x"}`)}
	out, err := r.call(t, c)
	if err != nil || out.Content != "x123ab" {
		t.Fatalf("out %+v err %v", out, err)
	}
	var names []string
	for _, h := range c.Hooks {
		names = append(names, h.Stage+":"+h.Hook)
	}
	if strings.Join(names, ",") != "before:one,before:two,before:three,after:a,after:b" {
		t.Fatalf("records %v", names)
	}
}

// TestAfterHookFailureWithholdsOutput: a failing after hook withholds the
// output (fail closed) or is passed over (fail open).
func TestAfterHookFailureWithholdsOutput(t *testing.T) {
	failing := hooks.AfterFunc(func(context.Context, *hooks.Call, hooks.Output) (string, error) {
		return "", errors.New("scanner down")
	})
	for _, open := range []bool{false, true} {
		ch := mustChain(t, []hooks.Hook{{Name: "scan", After: failing, FailOpen: open}}, true)
		r := newRig(t, ch)
		out, err := r.call(t, &tools.Call{Name: "echo", Arguments: json.RawMessage(`{"text":"private"}`)})
		if err != nil {
			t.Fatal(err)
		}
		if open && (out.Content != "private" || out.IsError) {
			t.Fatalf("fail open: %+v", out)
		}
		if !open && (strings.Contains(out.Content, "private") || !out.IsError || !strings.Contains(out.Content, "after hook scan failed (fail closed): scanner down")) {
			t.Fatalf("fail closed: %+v", out)
		}
		if ch.Failures("scan") != 1 {
			t.Fatalf("failures counted: %d", ch.Failures("scan"))
		}
	}
}

// TestRedactionOfRead: reading a file of secrets returns them redacted,
// and the record says what was replaced.
func TestRedactionOfRead(t *testing.T) {
	ch := mustChain(t, nil, true)
	r := newRig(t, ch)
	secret := "ghp_" + strings.Repeat("Z9y8X7w6V5", 4)
	if err := os.WriteFile(filepath.Join(r.ws, "env.txt"), []byte("GITHUB_TOKEN="+secret+"\nplain\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &tools.Call{Name: "read", Arguments: json.RawMessage(`{"path":"env.txt"}`)}
	out, err := r.call(t, c)
	if err != nil || strings.Contains(out.Content, secret) || !strings.Contains(out.Content, hooks.Marker("github-token")) || !strings.Contains(out.Content, "plain") {
		t.Fatalf("out %+v err %v", out, err)
	}
	if len(c.Hooks) != 1 || c.Hooks[0].Hook != hooks.RedactName || c.Hooks[0].OutputSHA256 == "" || !strings.Contains(c.Hooks[0].Note, "github-token") {
		t.Fatalf("records %+v", c.Hooks)
	}
	// Without redaction the secret comes through: the test above is not
	// passing for another reason.
	plain := newRig(t, mustChain(t, nil, false))
	if err := os.WriteFile(filepath.Join(plain.ws, "env.txt"), []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ = plain.call(t, &tools.Call{Name: "read", Arguments: json.RawMessage(`{"path":"env.txt"}`)})
	if !strings.Contains(out.Content, secret) {
		t.Fatalf("without redaction: %q", out.Content)
	}
}

// startRemote serves a hook over real NATS from its own connection, as a
// hook service would.
func startRemote(t *testing.T, s *testenv.Server, subject string, h hooks.HandlerFunc) {
	t.Helper()
	nc, _ := s.Connect(t)
	sub, err := hooks.Serve(nc, subject, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func buildRemote(t *testing.T, nc *nats.Conn, doc string) *hooks.Chain {
	t.Helper()
	cfg, err := hooks.Parse([]byte(doc), "hooks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ch, err := cfg.Build(hooks.BuildOptions{Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// TestRemoteHooksOverNATS: hook services answering over a real server
// change arguments and output; a silent one and a missing one fail the
// call closed (nothing runs, the failure is counted) unless fail_open.
func TestRemoteHooksOverNATS(t *testing.T) {
	s := testenv.StartNATS(t, "")
	nc, _ := s.Connect(t)
	var seen atomic.Value
	startRemote(t, s, "toolgate.hook.shout", func(_ context.Context, req *events.HookRequest) (*events.HookResponse, error) {
		seen.Store(*req)
		switch req.Stage {
		case events.HookBefore:
			var m map[string]string
			_ = json.Unmarshal(req.Arguments, &m)
			m["text"] = strings.ToUpper(m["text"])
			b, _ := json.Marshal(m)
			return &events.HookResponse{Action: events.HookModify, Arguments: b}, nil
		default:
			o := req.Output + "!"
			return &events.HookResponse{Action: events.HookModify, Output: &o}, nil
		}
	})
	startRemote(t, s, "toolgate.hook.veto", func(_ context.Context, req *events.HookRequest) (*events.HookResponse, error) {
		return &events.HookResponse{Action: events.HookDeny, Reason: "vetoed " + req.Agent}, nil
	})
	startRemote(t, s, "toolgate.hook.broken", func(context.Context, *events.HookRequest) (*events.HookResponse, error) {
		return nil, errors.New("database unreachable")
	})
	// A silent hook: subscribed, never answers.
	silentNC, _ := s.Connect(t)
	heard := make(chan struct{}, 4)
	if _, err := silentNC.Subscribe("toolgate.hook.silent", func(*nats.Msg) { heard <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	_ = silentNC.Flush()

	t.Run("modify both ways", func(t *testing.T) {
		ch := buildRemote(t, nc, "before:\n  - {name: shout, subject: toolgate.hook.shout}\nafter:\n  - {name: shout, subject: toolgate.hook.shout}\n")
		r := newRig(t, ch)
		c := &tools.Call{Name: "echo", Arguments: json.RawMessage(`{"text":"hi"}`), SessionID: "s1"}
		out, err := r.call(t, c)
		if err != nil || out.Content != "HI!" {
			t.Fatalf("out %+v err %v", out, err)
		}
		req := seen.Load().(events.HookRequest)
		if req.Stage != "after" || req.Hook != "shout" || req.Agent != "agent-7" || req.SessionID != "s1" || req.Tool != "echo" || req.Output != "HI" || string(req.Arguments) != `{"text":"HI"}` {
			t.Fatalf("the hook saw %+v", req)
		}
		if len(c.Hooks) != 2 {
			t.Fatalf("records %+v", c.Hooks)
		}
	})
	for _, c := range []struct {
		name, doc, reason string
		failures          int64
	}{
		{"deny", "before: [{name: veto, subject: toolgate.hook.veto}]", "denied by hook veto: vetoed agent-7", 0},
		{"error answer", "before: [{name: broken, subject: toolgate.hook.broken}]", "broken answered an error: database unreachable", 1},
		{"silent", "before: [{name: silent, subject: toolgate.hook.silent, timeout: 200ms}]", "silent did not answer within 200ms", 1},
		{"nobody", "before: [{name: gone, subject: toolgate.hook.gone}]", "nothing answers on toolgate.hook.gone", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			ch := buildRemote(t, nc, c.doc)
			r := newRig(t, ch)
			_, err := r.call(t, &tools.Call{Name: "write", Arguments: json.RawMessage(`{"path":"out.txt","content":"x"}`)})
			var pe *tools.PolicyError
			if !errors.As(err, &pe) || !strings.Contains(pe.Decision.Reason, c.reason) || !strings.HasPrefix(pe.Decision.Rule, "hook.") {
				t.Fatalf("err = %v, want a deny saying %q", err, c.reason)
			}
			if _, err := os.Stat(filepath.Join(r.ws, "out.txt")); !errors.Is(err, os.ErrNotExist) {
				t.Fatal("the file was written")
			}
			name := strings.TrimPrefix(pe.Decision.Rule, "hook.")
			if got := ch.Failures(name); got != c.failures {
				t.Fatalf("failures of %s: %d, want %d", name, got, c.failures)
			}
		})
	}
	select {
	case <-heard:
	default:
		t.Fatal("the silent hook was never asked")
	}
	t.Run("silent fail open", func(t *testing.T) {
		ch := buildRemote(t, nc, "before: [{name: silent, subject: toolgate.hook.silent, timeout: 200ms, fail_open: true}]")
		r := newRig(t, ch)
		c := &tools.Call{Name: "write", Arguments: json.RawMessage(`{"path":"out.txt","content":"x"}`)}
		out, err := r.call(t, c)
		if err != nil || out.IsError {
			t.Fatalf("out %+v err %v", out, err)
		}
		if b, err := os.ReadFile(filepath.Join(r.ws, "out.txt")); err != nil || string(b) != "x" {
			t.Fatalf("out.txt: %q %v", b, err)
		}
		if ch.Failures("silent") != 1 || len(c.Hooks) != 1 || !strings.Contains(c.Hooks[0].Note, "fail_open") {
			t.Fatalf("failures %d, records %+v", ch.Failures("silent"), c.Hooks)
		}
	})
}

// TestCancelledCallIsNotAHookFailure: a call cancelled while a hook
// thinks ends cancelled, and the hook is not counted as failing.
func TestCancelledCallIsNotAHookFailure(t *testing.T) {
	asked := make(chan struct{})
	slow := hooks.BeforeFunc(func(ctx context.Context, _ *hooks.Call) (hooks.Verdict, error) {
		close(asked)
		<-ctx.Done()
		return hooks.Verdict{}, ctx.Err()
	})
	ch := mustChain(t, []hooks.Hook{{Name: "slow", Before: slow, Timeout: time.Minute}}, true)
	r := newRig(t, ch)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-asked; cancel() }()
	_, err := r.pipe.Handle(ctx, &tools.Call{ID: "c", Agent: "a", Name: "echo", Arguments: json.RawMessage(`{"text":"hi"}`)})
	if !errors.Is(err, context.Canceled) || errors.Is(err, tools.ErrDenied) {
		t.Fatalf("err = %v, want cancelled", err)
	}
	if ch.Failures("slow") != 0 || r.ran.Load() != 0 {
		t.Fatalf("failures %d, ran %d", ch.Failures("slow"), r.ran.Load())
	}
}

// BenchmarkRemoteBeforeHook is one call through the pipeline with a
// remote before hook answering over a real local server, against the
// same call without hooks.
func BenchmarkRemoteBeforeHook(b *testing.B) {
	s := testenv.StartNATS(b, "")
	nc, _ := s.Connect(b)
	hnc, _ := s.Connect(b)
	if _, err := hooks.Serve(hnc, "toolgate.hook.pass", hooks.HandlerFunc(func(context.Context, *events.HookRequest) (*events.HookResponse, error) {
		return &events.HookResponse{Action: events.HookPass}, nil
	})); err != nil {
		b.Fatal(err)
	}
	_ = hnc.Flush()
	for _, c := range []struct {
		name  string
		chain *hooks.Chain
	}{
		{"none", mustChainB(b, nil)},
		{"remote", mustChainB(b, []hooks.Hook{{Name: "pass", Before: &hooks.Remote{Name: "pass", Subject: "toolgate.hook.pass", Conn: nc}}})},
	} {
		r := newRig(b, c.chain)
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := r.pipe.Handle(context.Background(), &tools.Call{ID: "c", Agent: "a", Name: "echo", Arguments: json.RawMessage(`{"text":"hi"}`)}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func mustChainB(b *testing.B, hs []hooks.Hook) *hooks.Chain {
	r, _ := hooks.NewRedactor(nil, nil)
	ch, err := hooks.New(hs, hooks.Options{Redactor: r})
	if err != nil {
		b.Fatal(err)
	}
	return ch
}
