package approvalcli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/parking"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/pkg/policy"
	"github.com/toolgate/toolgate/pkg/trust"
	"github.com/toolgate/toolgate/pkg/trust/trusttest"
)

const aliceToken = "alice-token-0123456789"

func TestApprovalsAndAmendmentsCommands(t *testing.T) {
	ns := testenv.StartNATS(t, "")
	nc, js := ns.Connect(t)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := bus.Provision(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	acct := trusttest.NewAccount(t)
	mgr, err := parking.NewManager(ctx, js, parking.Options{Name: "w", TrustedAccounts: []string{acct.Public},
		SweepInterval: 20 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	var resumed atomic.Int32
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = mgr.Run(ctx, func(context.Context, *parking.Parked, parking.Outcome) error { resumed.Add(1); return nil })
	}()
	tokens, _ := approver.ParseTokens(strings.NewReader("alice "+aliceToken+"\n"), "tokens")
	creds := acct.User(t, "approver", trust.RoleApprover, 0)
	srv, err := approver.New(ctx, nc, approver.Config{Tokens: tokens, Key: creds.Key, UserJWT: creds.JWT, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)

	ask := policy.Decision{Action: policy.Ask, Rule: "tools.bash.ask", Reason: "needs a person"}
	for id, command := range map[string]string{"c-approve": "git push origin main", "c-reject": "make <x> && make test", "c-wide": "rm -rf node_modules && npm ci"} {
		args, _ := json.Marshal(map[string]string{"command": command})
		p := &parking.Parked{CallID: id, Agent: "bot", Tool: "bash", Arguments: args, Decision: ask}
		if err := mgr.Park(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (string, string, int) {
		var o, e bytes.Buffer
		code := Run(args, &o, &e)
		return o.String(), e.String(), code
	}
	api := []string{"--approver", hs.URL, "--token", aliceToken}

	tests := []struct {
		name     string
		args     []string
		code     int
		out, err string
	}{
		{"no arguments", nil, 2, "", "usage"},
		{"unknown command", []string{"nope", "x"}, 2, "", "unknown command"},
		{"no token", []string{"approvals", "list", "--approver", hs.URL, "--token", ""}, 2, "", "no token"},
		{"bad token", []string{"approvals", "list", "--approver", hs.URL, "--token", "wrong-token-wrong"}, 1, "", "401"},
		{"list", append([]string{"approvals", "list"}, api...), 0, "c-approve", ""},
		{"list shows when", append([]string{"approvals", "list"}, api...), 0, "REQUESTED", ""},
		{"list shows arguments as written", append([]string{"approvals", "list"}, api...), 0, `{"command":"make <x> && make test"}`, ""},
		{"list --json too", append([]string{"approvals", "list", "--json"}, api...), 0, `"make <x> && make test"`, ""},
		{"show too", append([]string{"approvals", "show", "c-reject"}, api...), 0, `"make <x> && make test"`, ""},
		{"reject without reason", append([]string{"approvals", "reject", "c-reject"}, api...), 2, "", "--reason"},
		{"approve with flags after the id", append([]string{"approvals", "approve", "c-approve", "--comment", "ok", "--always-allow"}, api...), 0, "c-approve: approved", ""},
		{"approve again", append([]string{"approvals", "approve", "c-approve"}, api...), 1, "", "409"},
		{"reject", append([]string{"approvals", "reject", "--reason", "not today", "c-reject"}, api...), 0, "c-reject: rejected", ""},
		{"show lists the scopes, narrowest first", append([]string{"approvals", "show", "c-wide"}, api...), 0,
			`"always_allow_scopes": [
    {
      "id": "",
      "agent": "bot",
      "tool": "bash",
      "command_prefix": "rm -rf node_modules",`, ""},
		{"a scope wider than the call is refused", append([]string{"approvals", "approve", "c-wide", "--always-allow-prefix", "npm install"}, api...), 1, "", "400"},
		{"a wider scope, chosen", append([]string{"approvals", "approve", "c-wide", "--always-allow-prefix", "rm -rf"}, api...), 0, "c-wide: approved", ""},
		{"unknown call", append([]string{"approvals", "show", "nope"}, api...), 1, "", "404"},
		{"list empty", append([]string{"approvals", "list"}, api...), 0, "no pending approvals", ""},
		{"amendments list", []string{"policy", "amendments", "list", "--nats", ns.ClientURL()}, 0, "command git push origin main ...", ""},
		{"amendments list has the chosen scope", []string{"policy", "amendments", "list", "--nats", ns.ClientURL()}, 0, "command rm -rf ...", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := run(tt.args...)
			if code != tt.code || !strings.Contains(out, tt.out) || !strings.Contains(errOut, tt.err) {
				t.Fatalf("Run(%q) = %d\nstdout: %s\nstderr: %s\nwant %d, stdout with %q, stderr with %q", tt.args, code, out, errOut, tt.code, tt.out, tt.err)
			}
		})
	}
	out, _, _ := run("amendments", "list", "--json", "--nats", ns.ClientURL())
	var list []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 2 {
		t.Fatalf("amendments list --json = %s (%v)", out, err)
	}
	for _, a := range list {
		if out, errOut, code := run("amendments", "revoke", a.ID, "--nats", ns.ClientURL()); code != 0 || !strings.Contains(out, "revoked") {
			t.Fatalf("revoke = %d %s %s", code, out, errOut)
		}
	}
	if _, errOut, code := run("amendments", "revoke", list[0].ID, "--nats", ns.ClientURL()); code != 1 || !strings.Contains(errOut, "no amendment with that id") {
		t.Fatalf("revoke again = %d %s", code, errOut)
	}
	if out, _, _ := run("amendments", "list", "--nats", ns.ClientURL()); !strings.Contains(out, "no amendments") {
		t.Fatalf("after revoke: %s", out)
	}
	if n := resumed.Load(); n != 3 {
		t.Fatalf("resumed %d calls, want 3", n)
	}
}

func TestUnescapeHTML(t *testing.T) {
	for in, want := range map[string]string{
		`{"c":"a \u0026\u0026 b \u003cx\u003e"}`: `{"c":"a && b <x>"}`,
		`{"c":"\\u0026"}`:                        `{"c":"\\u0026"}`, // an escaped backslash, then u0026
		`{"c":"\"\u0026\n"}`:                     `{"c":"\"&\n"}`,
		`"\U003E"`:                               `">"`,
		`"\`:                                     `"\`,
	} {
		if got := string(unescapeHTML([]byte(in))); got != want {
			t.Errorf("unescapeHTML(%s) = %s, want %s", in, got, want)
		}
	}
}
