package test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestBudgetFromThePolicyFile: a worker process follows the budgets of
// its policy file; the call past the budget is refused with an error
// naming it and when it resets, a budget event and an audit record say
// so, and toolctl budgets shows the counter.
func TestBudgetFromThePolicyFile(t *testing.T) {
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws, "README.md"), "hello\n")
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, "tools: {default: allow}\nbudgets:\n  two-reads:\n    scope: session\n    tools: [read]\n    max_calls: 2\n    per: 24h\n")
	p := startProcess(t, ws, func(o *daemon.Options) { o.PolicyFile = pol })
	c := p.client(t, "alice")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var last *events.ResultData
	for i := range 3 {
		res, err := c.Call(ctx, "read", map[string]any{"path": "README.md"}, client.WithSession("s1"))
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 2; (res.Status == events.StatusOK) != want {
			t.Fatalf("call %d: %+v", i, res)
		}
		last = res
	}
	if last.Error != events.CodeBudgetExceeded || !strings.Contains(last.Output, `budget "two-reads" exceeded (max_calls): 2 of 2 calls used for session "s1" of agent alice; it resets at `) {
		t.Fatalf("refusal: %+v", last)
	}
	// Another session, and another tool, are not counted.
	if res, err := c.Call(ctx, "read", map[string]any{"path": "README.md"}, client.WithSession("s2")); err != nil || res.Status != events.StatusOK {
		t.Fatalf("another session: %+v %v", res, err)
	}
	if res, err := c.Call(ctx, "ls", nil, client.WithSession("s1")); err != nil || res.Status != events.StatusOK {
		t.Fatalf("another tool: %+v %v", res, err)
	}

	out, errOut, code := p.toolctl(t, "budgets", "--agent", "alice", "--session", "s1")
	if code != 0 || !strings.Contains(out, "two-reads") || !strings.Contains(out, "2/2") || strings.Contains(out, "s2") {
		t.Fatalf("toolctl budgets: %d\n%s%s", code, out, errOut)
	}
	out, _, code = p.toolctl(t, "audit", "--agent", "alice", "--json")
	if code != 0 || !strings.Contains(out, `"error":"budget_exceeded"`) {
		t.Fatalf("audit has no budget refusal: %d\n%s", code, out)
	}

	nc, _, err := identity.Dial(p.url, "", identity.RoleAdmin, "admin")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.OrderedConsumer(ctx, "TOOLGATE_EVENTS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.BudgetSubject("alice")}})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
	if err != nil {
		t.Fatalf("no budget event: %v", err)
	}
	var d events.BudgetExceededData
	if _, err := events.DecodeData(msg.Headers(), msg.Data(), &d); err != nil {
		t.Fatal(err)
	}
	if d.Budget != "two-reads" || d.Limit != "max_calls" || d.Used != 2 || d.ResetsAt == nil || d.SessionID != "s1" {
		b, _ := json.Marshal(d)
		t.Fatalf("event %s", b)
	}
}
