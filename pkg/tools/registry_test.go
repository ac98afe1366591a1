package tools

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/pkg/policy"
)

func nop() Handler {
	return HandlerFunc(func(context.Context, *Call) (*Output, error) { return &Output{Content: "ok"}, nil })
}

func TestRegisterRejectsBadDefinitions(t *testing.T) {
	reg := NewRegistry()
	reg.MustRegister(&Tool{Name: "read", Aliases: []string{"read_file"}, Handler: nop()})
	cases := []struct {
		name string
		tool *Tool
		want error
	}{
		{"empty name", &Tool{Handler: nop()}, ErrInvalidTool},
		{"dot in name", &Tool{Name: "a.b", Handler: nop()}, ErrInvalidTool},
		{"wildcard", &Tool{Name: "a*", Handler: nop()}, ErrInvalidTool},
		{"no handler", &Tool{Name: "x"}, ErrInvalidTool},
		{"bad schema", &Tool{Name: "x", Handler: nop(), Parameters: json.RawMessage(`{"type":"nonsense"}`)}, ErrInvalidTool},
		{"schema not JSON", &Tool{Name: "x", Handler: nop(), Parameters: json.RawMessage(`{`)}, ErrInvalidTool},
		{"duplicate name", &Tool{Name: "read", Handler: nop()}, ErrDuplicate},
		{"name taken by alias", &Tool{Name: "read_file", Handler: nop()}, ErrDuplicate},
		{"alias taken", &Tool{Name: "cat", Aliases: []string{"read"}, Handler: nop()}, ErrDuplicate},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := reg.Register(tc.tool); !errors.Is(err, tc.want) {
				t.Fatalf("Register = %v, want %v", err, tc.want)
			}
		})
	}
	if got := reg.Names(); len(got) != 1 || got[0] != "read" {
		t.Fatalf("a failed registration left a trace: %v", got)
	}
}

func TestListIsSortedAndAliasesResolve(t *testing.T) {
	reg := NewRegistry()
	var changes []string
	reg.Watch(func(c Change) {
		changes = append(changes, map[ChangeKind]string{Registered: "+", Unregistered: "-"}[c.Kind]+c.Tool.Name)
	})
	for _, n := range []string{"zeta", "alpha", "mid"} {
		reg.MustRegister(&Tool{Name: n, Aliases: []string{n + "_alias"}, Description: n, Handler: nop()})
	}
	if got := strings.Join(reg.Names(), ","); got != "alpha,mid,zeta" {
		t.Fatalf("names = %s", got)
	}
	if tool, ok := reg.Get("mid_alias"); !ok || tool.Name != "mid" {
		t.Fatal("alias did not resolve")
	}
	specs := reg.ForLLM()
	if len(specs) != 3 || specs[0].Name != "alpha" || string(specs[0].Parameters) != `{"type":"object"}` {
		t.Fatalf("ForLLM = %+v", specs)
	}
	if !reg.Unregister("zeta_alias") || reg.Unregister("zeta") {
		t.Fatal("unregister by alias")
	}
	if _, ok := reg.Get("zeta"); ok {
		t.Fatal("zeta still registered")
	}
	if got := strings.Join(changes, " "); got != "+zeta +alpha +mid -zeta" {
		t.Fatalf("changes = %s", got)
	}
}

func TestValidateNamesTheFailingField(t *testing.T) {
	reg := NewRegistry()
	reg.MustRegister(&Tool{Name: "t", Handler: nop(), Parameters: json.RawMessage(`{
		"type":"object","additionalProperties":false,"required":["path"],
		"properties":{"path":{"type":"string"},"limit":{"type":"integer","minimum":1}}}`)})
	cases := []struct {
		args   string
		fields []string
	}{
		{`{"path":"a","limit":0}`, []string{"/limit"}},
		{`{"path":3}`, []string{"/path"}},
		{`{}`, []string{""}},
		{`{"path":"a","extra":1}`, []string{""}},
		{`[1]`, []string{""}},
		{`{"path":"a"} {}`, []string{""}},
		{`not json`, []string{""}},
	}
	for _, tc := range cases {
		_, err := reg.Validate("t", json.RawMessage(tc.args))
		var ae *ArgumentError
		if !errors.As(err, &ae) {
			t.Fatalf("%s: err = %v", tc.args, err)
		}
		if len(ae.Fields) != len(tc.fields) || ae.Fields[0].Field != tc.fields[0] || ae.Fields[0].Message == "" {
			t.Fatalf("%s: fields = %+v", tc.args, ae.Fields)
		}
	}
	args, err := reg.Validate("t", json.RawMessage(`{"path":"a","limit":5}`))
	if err != nil || args["limit"].(json.Number) != "5" {
		t.Fatalf("valid args: %v %v", args, err)
	}
}

func TestPipelineSteps(t *testing.T) {
	reg := NewRegistry()
	var ran int
	reg.MustRegister(&Tool{Name: "slow", Kind: policy.KindOther, DefaultTimeout: 20 * time.Millisecond,
		Handler: HandlerFunc(func(ctx context.Context, c *Call) (*Output, error) {
			ran++
			<-ctx.Done()
			return &Output{Content: "partial"}, ctx.Err()
		})})
	reg.MustRegister(&Tool{Name: "boom", Handler: HandlerFunc(func(context.Context, *Call) (*Output, error) { ran++; panic("kaboom") })})
	reg.MustRegister(&Tool{Name: "big", MaxOutput: 100, Handler: HandlerFunc(func(context.Context, *Call) (*Output, error) {
		ran++
		return &Output{Content: strings.Repeat("line of text\n", 100)}, nil
	})})
	reg.MustRegister(&Tool{Name: "asky", Handler: nop()})
	gate := policy.EvaluatorFunc(func(_ context.Context, r policy.Request) policy.Decision {
		switch r.Tool {
		case "asky":
			return policy.Decision{Action: policy.Ask, Reason: "a person decides", Rule: "r.ask"}
		case "asktwo":
			return policy.Decision{Action: policy.Ask, Reason: "two people decide", Rule: "r.ask2", Approvers: 2}
		case "gatepanic":
			panic("gate bug")
		}
		return policy.Decision{Action: policy.Allow}
	})
	p := NewPipeline(reg, WithGate(gate), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	ctx := context.Background()

	out, err := p.Handle(ctx, &Call{Name: "slow"})
	if !errors.Is(err, ErrTimeout) || out == nil || out.Content != "partial" {
		t.Fatalf("slow: %v %+v", err, out)
	}
	if _, err := p.Handle(ctx, &Call{Name: "boom"}); !errors.Is(err, ErrPanic) {
		t.Fatalf("boom: %v", err)
	}
	out, err = p.Handle(ctx, &Call{Name: "big"})
	if err != nil || out.Metadata["truncated"] != true || len([]rune(out.Content)) > 100+40 || !strings.Contains(out.Content, "characters truncated") {
		t.Fatalf("big: %v %d %v", err, len(out.Content), out.Metadata)
	}
	_, err = p.Handle(ctx, &Call{Name: "asky"})
	var pk *Parked
	if !errors.Is(err, ErrApprovalRequired) || !errors.As(err, &pk) || pk.NeedsAnswer() || pk.Decision.Rule != "r.ask" {
		t.Fatalf("asky: %v", err)
	}
	if out, err := p.Handle(ctx, &Call{Name: "asky", Approved: true}); err != nil || out.Content != "ok" {
		t.Fatalf("approved asky: %v", err)
	}
	// Resumed with fewer approvals than the policy in force now needs.
	reg.MustRegister(&Tool{Name: "asktwo", Handler: HandlerFunc(func(context.Context, *Call) (*Output, error) { ran++; return &Output{}, nil })})
	one := &Call{Name: "asktwo", Approved: true, Approvals: 1}
	var pe *PolicyError
	if _, err := p.Handle(ctx, one); !errors.Is(err, ErrDenied) || !errors.As(err, &pe) || pe.Decision.Action != policy.Deny {
		t.Fatalf("asktwo with one approval: %v", err)
	}
	if one.Decision == nil || one.Decision.Action != policy.Ask {
		t.Fatalf("asktwo with one approval: the call's gate decision %+v, want the gate's ask (the denial is the run's)", one.Decision)
	}
	if _, err := p.Handle(ctx, &Call{Name: "asktwo", Approved: true, Approvals: 2}); err != nil {
		t.Fatalf("asktwo with two approvals: %v", err)
	}
	if ran != 4 {
		t.Fatalf("tools ran %d times, want 4", ran)
	}
	// A gate that panics fails closed.
	reg.MustRegister(&Tool{Name: "gatepanic", Handler: nop()})
	if _, err := p.Handle(ctx, &Call{Name: "gatepanic"}); !errors.Is(err, ErrDenied) {
		t.Fatalf("gate panic: %v", err)
	}
}

func TestTruncate(t *testing.T) {
	cases := []struct {
		name string
		in   string
		max  int
	}{
		{"ascii lines", strings.Repeat("0123456789\n", 1000), 500},
		{"multibyte", strings.Repeat("日本語のテキスト", 500), 300},
		{"one long line", strings.Repeat("x", 10000), 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, cut := Truncate(tc.in, tc.max)
			if cut <= 0 {
				t.Fatal("not cut")
			}
			if !strings.Contains(out, Marker(cut)) {
				t.Fatal("no marker")
			}
			if n := len([]rune(out)) - len([]rune(Marker(cut))); n+cut != len([]rune(tc.in)) {
				t.Fatalf("kept %d + cut %d != %d", n, cut, len([]rune(tc.in)))
			}
			if !strings.HasPrefix(tc.in, out[:strings.Index(out, Marker(cut))]) {
				t.Fatal("head is not a prefix")
			}
			if !strings.HasSuffix(tc.in, out[strings.Index(out, Marker(cut))+len(Marker(cut)):]) {
				t.Fatal("tail is not a suffix")
			}
			if len([]rune(out)) > tc.max {
				t.Fatalf("%d characters, over the bound %d", len([]rune(out)), tc.max)
			}
		})
	}
	if s, cut := Truncate("short", 100); s != "short" || cut != 0 {
		t.Fatal("short input changed")
	}
}

func TestTimeoutArgumentLiftsTheDefaultUpToTheMaximum(t *testing.T) {
	reg := NewRegistry()
	reg.MustRegister(&Tool{Name: "wait", DefaultTimeout: 20 * time.Millisecond, MaxTimeout: 2 * time.Second, TimeoutArgument: "timeout",
		Parameters: json.RawMessage(`{"type":"object","properties":{"ms":{"type":"integer"},"timeout":{"type":"integer"}}}`),
		Handler: HandlerFunc(func(ctx context.Context, c *Call) (*Output, error) {
			ms, _ := c.Args["ms"].(json.Number).Int64()
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
				return &Output{Content: "done"}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})})
	p := NewPipeline(reg)
	ctx := context.Background()
	// This tool ignores its own timeout argument: the pipeline's backstop
	// (the default plus a grace) still ends it.
	if _, err := p.Handle(ctx, &Call{Name: "wait", Arguments: json.RawMessage(`{"ms":5000}`)}); !errors.Is(err, ErrTimeout) {
		t.Fatalf("default bound: %v", err)
	}
	if out, err := p.Handle(ctx, &Call{Name: "wait", Arguments: json.RawMessage(`{"ms":200,"timeout":1500}`)}); err != nil || out.Content != "done" {
		t.Fatalf("lifted bound: %v", err)
	}
	// The caller's own bound still shortens it.
	if _, err := p.Handle(ctx, &Call{Name: "wait", Timeout: 20 * time.Millisecond, Arguments: json.RawMessage(`{"ms":200,"timeout":1500}`)}); !errors.Is(err, ErrTimeout) {
		t.Fatalf("caller bound: %v", err)
	}
}
