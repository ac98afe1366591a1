package test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/toolgate/toolgate/internal/daemon"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/teststack"
	"github.com/toolgate/toolgate/pkg/client"
	"github.com/toolgate/toolgate/pkg/events"
)

// TestParkedCallsPerAgentAreCapped: an agent cannot fill the approvals
// with calls. Over its cap a call is not parked and gets an error result
// saying why (nothing waits unanswered, nothing runs); other agents park
// as before.
func TestParkedCallsPerAgentAreCapped(t *testing.T) {
	ws := newWorkspace(t)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, askWrites)
	w := startProcess(t, ws, func(o *daemon.Options) { o.PolicyFile, o.MaxParked = pol, 2 })
	alice := teststack.Client(t, w.url, "alice")
	for i, id := range []string{"cap-a1", "cap-a2"} {
		teststack.SubmitWrite(t, alice, id, "f"+string(rune('1'+i)), "x")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	parked := false
	res, err := alice.Call(ctx, "write", map[string]any{"path": "over", "content": "x"}, client.WithID("cap-a3"),
		client.OnPending(func(events.ResultData) { parked = true; cancel() }))
	if parked || err != nil && res == nil {
		t.Fatalf("the call over the cap: parked %v, %+v, %v", parked, res, err)
	}
	if res.Status != events.StatusError || res.Error != events.CodeTooManyParked {
		t.Fatalf("the call over the cap: %s %s %q", res.Status, res.Error, res.Output)
	}
	t.Logf("refused: %s", res.Output)
	if _, err := os.Stat(filepath.Join(ws, "over")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the refused call ran")
	}
	// Another agent is not held up by alice's calls.
	teststack.SubmitWrite(t, teststack.Client(t, w.url, "bob"), "cap-b1", "b1", "x")
}

// TestToolListingOfAnotherAgentIsRefused: the listing for agent X (which
// leaves out what X's policy denies) is answered to X and to an admin,
// never to another agent.
func TestToolListingOfAnotherAgentIsRefused(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, "tools:\n  default: allow\nagents:\n  alice:\n    deny: [glob]\n")
	w := startProcess(t, newWorkspace(t), func(o *daemon.Options) { o.PolicyFile = pol })
	ask := func(role identity.Role, name, subject string) ([]events.ToolData, string) {
		t.Helper()
		nc := dialAs(t, w.url, role, name)
		body, _ := json.Marshal(events.ToolsListRequest{Agent: "alice"})
		m, err := nc.Request(subject, body, 10*time.Second)
		if err != nil {
			t.Fatalf("%s %s: %v", role, name, err)
		}
		var list []events.ToolData
		if e := m.Header.Get(micro.ErrorHeader); e != "" {
			return nil, e
		}
		if err := json.Unmarshal(m.Data, &list); err != nil {
			t.Fatalf("%s %s: %v: %s", role, name, err, m.Data)
		}
		return list, ""
	}
	names := func(l []events.ToolData) []string {
		var n []string
		for _, d := range l {
			n = append(n, d.Name)
		}
		return n
	}
	// From the agents account a request's reply names no one: a listing
	// for an agent is asked on that agent's own subject, which only it
	// (or an admin) may publish to.
	if l, e := ask(identity.RoleAgent, "mallory", events.SubjectToolsList); e == "" || l != nil {
		t.Fatalf("mallory got alice's listing: %v", names(l))
	}
	if l, e := ask(identity.RoleAgent, "alice", events.SubjectToolsList); e == "" || l != nil {
		t.Fatalf("a listing for alice went to a reply that names no one: %v", names(l))
	}
	for _, who := range []struct {
		role    identity.Role
		name    string
		subject string
	}{{identity.RoleAgent, "alice", events.ToolsListSubject("alice")}, {identity.RoleAdmin, "admin", events.SubjectToolsList},
		{identity.RoleAdmin, "admin", events.ToolsListSubject("alice")}} {
		l, e := ask(who.role, who.name, who.subject)
		if e != "" || !slices.Contains(names(l), "read") || slices.Contains(names(l), "glob") {
			t.Errorf("%s %s: %v %q", who.role, who.name, names(l), e)
		}
	}
	// A client on mallory's connection under alice's name cannot ask on
	// alice's subject (a permissions violation: no answer).
	nc := dialAs(t, w.url, identity.RoleAgent, "mallory")
	c, err := client.New(nc, "alice") // mallory's connection, alice's name
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if l, err := c.AgentTools(ctx); err == nil {
		t.Errorf("mallory's client listed alice's tools: %v", names(l))
	}
}
