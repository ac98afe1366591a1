package test

import (
	"bytes"
	"encoding/json"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	tekuri "github.com/santhosh-tekuri/jsonschema/v5"
	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/internal/schemagen"
	"github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/events"
)

// updateSchemas (-update) rewrites the generated files: docs/schemas from
// the Go types, deploy/nats/accounts.conf from the roles' permissions.
var updateSchemas = flag.Bool("update", false, "rewrite generated files: docs/schemas, deploy/nats/accounts.conf")

// payloadTypes are the Go types behind the schemas in docs/schemas.
var payloadTypes = map[string]reflect.Type{
	"call.json":               reflect.TypeFor[events.CallData](),
	"result.json":             reflect.TypeFor[events.ResultData](),
	"progress.json":           reflect.TypeFor[events.ProgressData](),
	"audit.json":              reflect.TypeFor[events.AuditData](),
	"audit-checkpoint.json":   reflect.TypeFor[events.AuditCheckpointData](),
	"tool.json":               reflect.TypeFor[events.ToolData](),
	"violation.json":          reflect.TypeFor[events.ViolationData](),
	"tool-refused.json":       reflect.TypeFor[events.ToolRefusedData](),
	"policy-change.json":      reflect.TypeFor[events.PolicyChangeData](),
	"tools-list-request.json": reflect.TypeFor[events.ToolsListRequest](),
	"budget-exceeded.json":    reflect.TypeFor[events.BudgetExceededData](),
	"cancel-reply.json":       reflect.TypeFor[events.CancelReply](),
	"hook-request.json":       reflect.TypeFor[events.HookRequest](),
	"hook-response.json":      reflect.TypeFor[events.HookResponse](),
	"approval-request.json":   reflect.TypeFor[approval.Request](),
	"approval-decision.json":  reflect.TypeFor[approval.Decision](),
	"task-request.json":       reflect.TypeFor[events.TaskRequestData](),
	"task-result.json":        reflect.TypeFor[events.TaskResultData](),
	"task-progress.json":      reflect.TypeFor[events.TaskProgressData](),
	"task-cancel.json":        reflect.TypeFor[events.TaskCancelData](),
}

// payloadSchema is the JSON Schema document of a payload type, as
// committed under docs/schemas.
func payloadSchema(t *testing.T, name string, typ reflect.Type) []byte {
	t.Helper()
	b, err := schemagen.Payload(name, typ)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type asyncDoc struct {
	AsyncAPI string `yaml:"asyncapi"`
	Channels map[string]struct {
		Address    string         `yaml:"address"`
		Parameters map[string]any `yaml:"parameters"`
		Messages   map[string]struct {
			Ref string `yaml:"$ref"`
		} `yaml:"messages"`
	} `yaml:"channels"`
	Operations map[string]struct {
		Action  string `yaml:"action"`
		Channel struct {
			Ref string `yaml:"$ref"`
		} `yaml:"channel"`
	} `yaml:"operations"`
	Components struct {
		Messages map[string]struct {
			Name    string    `yaml:"name"`
			Payload yaml.Node `yaml:"payload"`
		} `yaml:"messages"`
	} `yaml:"components"`
}

// TestAsyncAPIMatchesTheCode checks docs/asyncapi.yaml and docs/schemas
// against the Go contract: every CloudEvents type constant is a message and
// every message type is a constant, every channel address is what the
// subject functions build, every subject function has a channel, and every
// payload schema is the one generated from its Go type.
func TestAsyncAPIMatchesTheCode(t *testing.T) {
	raw, err := os.ReadFile("../docs/asyncapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc asyncDoc
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("docs/asyncapi.yaml: %v", err)
	}
	if doc.AsyncAPI != "3.0.0" {
		t.Errorf("asyncapi %q, want 3.0.0", doc.AsyncAPI)
	}

	// CloudEvents types: the constants of the code, read from the source.
	consts := ceTypeConstants(t, "../pkg/events/types.go", "../pkg/events/task.go", "../pkg/events/budget.go", "../pkg/approval/approval.go")
	var documented []string
	for _, m := range doc.Components.Messages {
		if strings.HasPrefix(m.Name, "dev.toolgate.") {
			documented = append(documented, m.Name)
		}
	}
	slices.Sort(documented)
	documented = slices.Compact(documented)
	if !slices.Equal(consts, documented) {
		t.Errorf("CloudEvents types in the code %v\nand in docs/asyncapi.yaml %v differ", consts, documented)
	}

	// Channels: addresses against the subject functions.
	a, id, tool := "agent-7", "call-1", "read"
	subjects := map[string]string{
		"call":             events.CallSubject(a, tool),
		"result":           events.ResultSubject(a, id),
		"progress":         events.ProgressSubject(a, id),
		"audit":            events.AuditSubject(a, tool),
		"auditCheckpoint":  events.AuditCheckpointSubject("w1"),
		"toolEvent":        events.ToolEventSubject(tool),
		"toolRefused":      events.ToolRefusedSubject(tool),
		"policyViolation":  events.ViolationSubject(a),
		"policyChange":     events.PolicyChangeSubject,
		"approvalRequest":  events.ApprovalRequestSubject(id),
		"approvalDecision": events.ApprovalDecisionSubject(id),
		"approvalRefused":  approval.RefusedSubject(id),
		"approvalResolved": approval.ResolvedSubject(id),
		"toolsList":        events.SubjectToolsList,
		"agentToolsList":   events.ToolsListSubject(a),
		"budgetExceeded":   events.BudgetSubject(a),
		"cancel":           events.CancelSubject(a, id),
		"deadLetter":       "toolgate.dlq." + a + "." + tool, // moved by the worker, see internal/bus
		"task":             events.TaskSubject(a, id),
		"taskResult":       events.TaskResultSubject(a, id),
		"taskProgress":     events.TaskProgressSubject(a, id),
		"taskCancel":       events.TaskCancelSubject(a, id),
		"hook":             events.HookSubject("stamp"),
	}
	params := strings.NewReplacer("{agent}", a, "{callId}", id, "{tool}", tool, "{hook}", "stamp", "{taskId}", id, "{worker}", "w1")
	for name, ch := range doc.Channels {
		want, ok := subjects[name]
		if !ok {
			t.Errorf("channel %s is not checked against the code", name)
			continue
		}
		if got := params.Replace(ch.Address); got != want {
			t.Errorf("channel %s: address %s gives %s, the code %s", name, ch.Address, got, want)
		}
		for p := range ch.Parameters {
			if !strings.Contains(ch.Address, "{"+p+"}") {
				t.Errorf("channel %s: parameter %s is not in the address", name, p)
			}
		}
		for mname, m := range ch.Messages {
			if _, ok := doc.Components.Messages[strings.TrimPrefix(m.Ref, "#/components/messages/")]; !ok {
				t.Errorf("channel %s: message %s refers to %s, which is not defined", name, mname, m.Ref)
			}
		}
	}
	for name := range subjects {
		if _, ok := doc.Channels[name]; !ok {
			t.Errorf("subject %s has no channel in docs/asyncapi.yaml", name)
		}
	}
	for _, fn := range subjectFuncs(t, "../pkg/events/subjects.go", "../pkg/events/task.go", "../pkg/events/budget.go", "../pkg/events/cancel.go", "../pkg/approval/approval.go") {
		if !subjectFuncCovered[fn] {
			t.Errorf("subject function %s is new: give it a channel in docs/asyncapi.yaml and a line in this test", fn)
		}
	}
	for name, op := range doc.Operations {
		if _, ok := doc.Channels[strings.TrimPrefix(op.Channel.Ref, "#/channels/")]; !ok || (op.Action != "send" && op.Action != "receive") {
			t.Errorf("operation %s: action %q on %s", name, op.Action, op.Channel.Ref)
		}
	}

	// Payload schemas: every referenced file exists, and is generated.
	refs := map[string]bool{}
	for name, m := range doc.Components.Messages {
		var walk func(n *yaml.Node)
		walk = func(n *yaml.Node) {
			for i := 0; i+1 < len(n.Content); i++ {
				if n.Kind == yaml.MappingNode && i%2 == 0 && n.Content[i].Value == "$ref" && strings.HasPrefix(n.Content[i+1].Value, "schemas/") {
					refs[strings.TrimPrefix(n.Content[i+1].Value, "schemas/")] = true
				}
			}
			for _, c := range n.Content {
				walk(c)
			}
		}
		walk(&m.Payload)
		if m.Payload.Kind == 0 {
			t.Errorf("message %s has no payload", name)
		}
	}
	for f, typ := range payloadTypes {
		if !refs[f] {
			t.Errorf("schemas/%s (%s) is not used by any message", f, typ)
		}
		got := payloadSchema(t, f, typ)
		path := filepath.Join("../docs/schemas", f)
		if *updateSchemas {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test ./test -run AsyncAPI -update)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("docs/schemas/%s differs from %s: run go test ./test -run AsyncAPI -update and review", f, typ)
		}
	}
	for f := range refs {
		if _, err := os.Stat(filepath.Join("../docs/schemas", f)); err != nil {
			t.Errorf("docs/asyncapi.yaml refers to schemas/%s: %v", f, err)
		}
	}
}

// subjectFuncCovered are the subject functions the channels above check.
var subjectFuncCovered = map[string]bool{
	"CallSubject": true, "ToolRefusedSubject": true, "ResultSubject": true, "ProgressSubject": true, "AuditSubject": true, "AuditCheckpointSubject": true,
	"ToolEventSubject": true, "ViolationSubject": true, "ApprovalRequestSubject": true,
	"ApprovalDecisionSubject": true, "RefusedSubject": true, "ResolvedSubject": true,
	"TaskSubject": true, "TaskResultSubject": true, "TaskProgressSubject": true, "TaskCancelSubject": true,
	"BudgetSubject": true, "CancelSubject": true, "ToolsListSubject": true,
}

// ceTypeConstants returns the values of the string constants in files
// that are toolgate CloudEvents types, sorted.
func ceTypeConstants(t *testing.T, files ...string) []string {
	t.Helper()
	var out []string
	for _, f := range files {
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if v, err := strconv.Unquote(lit.Value); err == nil && strings.HasPrefix(v, "dev.toolgate.") && strings.Count(v, ".") >= 4 {
					out = append(out, v)
				}
			}
			return true
		})
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// subjectFuncs returns the exported functions of files named *Subject.
func subjectFuncs(t *testing.T, files ...string) []string {
	t.Helper()
	var out []string
	for _, f := range files {
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Name.IsExported() && strings.HasSuffix(fd.Name.Name, "Subject") && !strings.HasPrefix(fd.Name.Name, "Parse") {
				out = append(out, fd.Name.Name)
			}
		}
	}
	return out
}

// TestSchemasAcceptWhatTheCodeSends validates payloads as the Go types
// encode them against the committed schemas, with the validator the
// workers use for tool arguments.
func TestSchemasAcceptWhatTheCodeSends(t *testing.T) {
	now := time.Now().UTC()
	samples := map[string]any{
		"call.json":               events.CallData{Arguments: json.RawMessage(`{"path":"README.md"}`), SessionID: "s", TimeoutMS: 5},
		"result.json":             events.ResultData{CallID: "c", Agent: "a", Tool: "read", Status: events.StatusDenied, IsError: true, Metadata: map[string]any{"n": 1}, Decision: &events.Decision{Action: "deny", Reason: "r"}},
		"audit.json":              events.AuditData{CallID: "c", Agent: "a", Tool: "t", Status: events.StatusOK, Time: now, Approval: &events.ApprovalAudit{Outcome: "approved", DecidedAt: now}, Chain: "w1-x", Seq: 2, Prev: "ab"},
		"audit-checkpoint.json":   events.AuditCheckpointData{Chain: "w1-x", Seq: 2, Head: "ab", Worker: "w1", Time: now},
		"tool.json":               events.ToolData{Name: "read", Parameters: json.RawMessage(`{"type":"object"}`), Worker: "w"},
		"approval-decision.json":  approval.Decision{CallID: "c", ArgsSHA256: "x", Outcome: approval.Approve, Approver: "alice", DecidedAt: now, AlwaysAllow: &approval.Amendment{ID: "a1", Agent: "a", Tool: "bash", CommandPrefix: "git status", CreatedAt: now, Grant: &approval.Decision{CallID: "c", ArgsSHA256: "x", Outcome: approval.Approve, Approver: "alice", DecidedAt: now}}},
		"tools-list-request.json": events.ToolsListRequest{Agent: "a"},
		"budget-exceeded.json":    events.BudgetExceededData{CallID: "c", Agent: "a", Tool: "bash", Budget: "hourly", Scope: "agent", Limit: "max_calls", Max: 5, Used: 5, ResetsAt: &now, Message: "m", Worker: "w"},
		"cancel-reply.json":       events.CancelReply{CallID: "c", Agent: "a", State: events.CancelFinished, Status: events.StatusOK, Message: "m"},
		"hook-request.json":       events.HookRequest{Stage: events.HookAfter, Hook: "h", CallID: "c", Agent: "a", Tool: "read", Arguments: json.RawMessage(`{"path":"x"}`), Output: "text"},
		"hook-response.json":      events.HookResponse{Action: events.HookModify, Arguments: json.RawMessage(`{"path":"y"}`)},
		"result.json#hooks":       events.ResultData{CallID: "c", Agent: "a", Tool: "read", Status: events.StatusOK, Hooks: []events.HookChange{{Hook: "redact", Stage: "after", OutputSHA256: "x", Note: "replaced: jwt"}}},
	}
	for file, v := range samples {
		c := jsonschemaCompiler()
		s, err := c.Compile(filepath.Join("..", "docs", "schemas", strings.Split(file, "#")[0]))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		b, _ := json.Marshal(v)
		var doc any
		_ = json.Unmarshal(b, &doc)
		if err := s.Validate(doc); err != nil {
			t.Errorf("%s refuses what the code sends (%s): %v", file, b, err)
		}
	}
}

func jsonschemaCompiler() *tekuri.Compiler {
	c := tekuri.NewCompiler()
	c.Draft = tekuri.Draft2020
	return c
}
