package policy

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func mustParse(t *testing.T, doc string) *Policy {
	t.Helper()
	p, _, err := Parse([]byte(doc), "test")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type call struct {
	agent string
	tool  string
	kind  Kind
	args  map[string]any
}

func (c call) request(ws string) Request {
	agent := c.agent
	if agent == "" {
		agent = "agent-1"
	}
	k := c.kind
	known := true
	if c.kind == "unknown" {
		known, k = false, ""
	} else if k == "" {
		k, _ = BuiltinKind(c.tool)
		if k == "" {
			k = KindOther
		}
	}
	return Request{Agent: agent, Tool: c.tool, Known: known, Kind: k, Arguments: c.args, Workspace: ws}
}

func sh(cmd string) map[string]any { return map[string]any{"command": cmd} }
func at(p string) map[string]any   { return map[string]any{"path": p} }

type decisionCase struct {
	name   string
	call   call
	action Action
	rule   string // prefix of the rule id, when set
}

func checkDecisions(t *testing.T, g *Gate, ws string, cases []decisionCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := g.Evaluate(context.Background(), tc.call.request(ws))
			if d.Action != tc.action || !strings.HasPrefix(d.Rule, tc.rule) {
				t.Errorf("got %s by %s (%s), want %s by %s", d.Action, d.Rule, d.Reason, tc.action, tc.rule)
			}
			if d.Reason == "" || d.Revision != g.Policy().Revision() {
				t.Errorf("decision %+v lacks a reason or the revision %s", d, g.Policy().Revision())
			}
		})
	}
}

// TestSeed001 runs every "Testing Policies" scenario of seed 001.
func TestSeed001(t *testing.T) {
	ws := t.TempDir()
	for _, file := range []string{"testdata/seed001.yaml", "testdata/seed001_nested.yaml"} {
		t.Run(file, func(t *testing.T) {
			g := NewGate(loadPolicy(t, file))
			checkDecisions(t, g, ws, []decisionCase{
				{"tool in allow list", call{tool: "read", args: at("f.txt")}, Allow, ""},
				{"tool in deny list", call{tool: "dangerous_tool"}, Deny, ""},
				{"unknown tool with on_miss", call{tool: "mcp__x__y", kind: "unknown"}, Ask, ""},
				{"known tool not in the allow list", call{tool: "glob", args: map[string]any{"pattern": "*.go"}}, Ask, ""},
				{"exec with allowlist and safe bin", call{tool: "exec", args: sh("jq '.' file.json")}, Allow, ""},
				{"exec with allowlist and safe bin grep", call{tool: "exec", args: sh("grep -n foo file.json")}, Allow, ""},
				{"exec with allowlist and unsafe bin", call{tool: "exec", args: sh("curl https://example.com")}, Ask, ""},
				{"safe bin in a pipeline with an unsafe one", call{tool: "exec", args: sh("jq . f.json | curl -d @- x")}, Ask, ""},
			})
		})
	}
	scenarios := []struct {
		name string
		doc  string
		call call
		want Action
		rule string
	}{
		{"deny wins over allow", "allow: [read, dangerous_tool]\ndeny: [dangerous_tool]\n", call{tool: "dangerous_tool"}, Deny, "deny[0]"},
		{"unknown tool with off", "allow: [read]\nexec: {ask: off}\n", call{tool: "mcp__x", kind: "unknown"}, Deny, "exec.ask"},
		{"unknown tool with always", "allow: [read]\nexec: {ask: always}\n", call{tool: "mcp__x", kind: "unknown"}, Ask, "exec.ask"},
		{"unknown tool in the allow list still asks", "allow: [mcp__x]\n", call{tool: "mcp__x", kind: "unknown"}, Ask, "builtin.ask_mode"},
		{"exec with deny security", "allow: [exec]\nexec: {security: deny, safe_bins: [jq]}\n", call{tool: "exec", args: sh("jq . f")}, Deny, "exec.security"},
		{"exec with allowlist, unsafe bin, off", "allow: [exec]\nexec: {security: allowlist, ask: off, safe_bins: [jq]}\n", call{tool: "exec", args: sh("curl x")}, Deny, "exec.security"},
		{"exec with allowlist, unsafe bin, on_miss", "allow: [exec]\nexec: {security: allowlist, ask: on_miss, safe_bins: [jq]}\n", call{tool: "exec", args: sh("curl x")}, Ask, "exec.security"},
		{"exec with full", "allow: [exec]\nexec: {security: full}\n", call{tool: "exec", args: sh("curl x")}, Allow, "exec.security"},
		{"exec with full, blacklisted", "allow: [exec]\nexec: {security: full, blacklist: [\"curl *\"]}\n", call{tool: "exec", args: sh("curl x")}, Deny, "exec.blacklist[0]"},
		{"exec with full and ask always", "allow: [exec]\nexec: {security: full, ask: always}\n", call{tool: "exec", args: sh("ls")}, Ask, "exec.ask"},
		{"exec with allowlist and ask always, safe bin", "allow: [exec]\nexec: {security: allowlist, ask: always, safe_bins: [jq]}\n", call{tool: "exec", args: sh("jq . f")}, Ask, "exec.ask"},
		{"exec with full still never allows the unknowable", "allow: [exec]\nexec: {security: full}\n", call{tool: "exec", args: sh("$CMD x")}, Ask, "builtin.shell.dynamic_command"},
		{"exec with full and ask off denies the unknowable", "allow: [exec]\nexec: {security: full, ask: off}\n", call{tool: "exec", args: sh("eval \"$x\"")}, Deny, "builtin.shell"},
		{"exec not in the allow list", "allow: [read]\nexec: {security: full}\n", call{tool: "exec", args: sh("ls")}, Ask, "builtin.ask_mode"},
		{"parse error is deny even under full", "allow: [exec]\nexec: {security: full}\n", call{tool: "exec", args: sh("ls 'x")}, Deny, "builtin.shell.parse"},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			checkDecisions(t, NewGate(mustParse(t, sc.doc)), ws, []decisionCase{{sc.name, sc.call, sc.want, sc.rule}})
		})
	}
}

// TestSeed000 runs seed 000's policy.yaml as written.
func TestSeed000(t *testing.T) {
	ws, _ := fixture(t)
	big := filepath.Join(ws, "big.log")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 11<<20); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.CreateTemp("/tmp", "seed000-*.txt")
	if err != nil {
		t.Fatal(err)
	}
	tmp.Close()
	t.Cleanup(func() { os.Remove(tmp.Name()) })
	g := NewGate(loadPolicy(t, "testdata/seed000.yaml"))
	checkDecisions(t, g, ws, []decisionCase{
		{"read inside the workspace", call{tool: "read_file", args: at("main.go")}, Allow, "tools.read_file.action"},
		{"read under /tmp", call{tool: "read_file", args: at(tmp.Name())}, Allow, "tools.read_file.action"},
		{"read outside", call{tool: "read_file", args: at("/etc/hostname")}, Deny, "tools.read_file.constraints.allowed_paths"},
		{"read ssh key", call{tool: "read", args: at("~/.ssh/id_rsa")}, Deny, "tools.read_file.constraints.denied_paths[0]"},
		{"read pem", call{tool: "read", args: at("secrets/server.pem")}, Deny, "tools.read_file.constraints.denied_paths[1]"},
		{"read key", call{tool: "read", args: at("deploy/prod.KEY")}, Deny, "tools.read_file.constraints.denied_paths[2]"},
		{"read above max_size", call{tool: "read_file", args: at("big.log")}, Deny, "tools.read_file.constraints.max_size"},
		{"whitelisted command", call{tool: "run_shell", args: sh("git diff --stat")}, Allow, "tools.run_shell.whitelist[4]"},
		{"exact whitelist", call{tool: "run_shell", args: sh("git status")}, Allow, "tools.run_shell.whitelist[3]"},
		{"other command asks", call{tool: "run_shell", args: sh("make build")}, Ask, "tools.run_shell.action"},
		{"blacklisted", call{tool: "run_shell", args: sh("rm -rf build")}, Deny, "tools.run_shell.blacklist[0]"},
		{"blacklisted sudo", call{tool: "bash", args: sh("sudo ls")}, Deny, "tools.run_shell.blacklist[1]"},
		{"blacklisted chmod", call{tool: "exec", args: sh("chmod 777 main.go")}, Deny, "tools.run_shell.blacklist[2]"},
		{"search allowed", call{tool: "search_files", args: map[string]any{"pattern": "x"}}, Allow, "tools.search_files.action"},
		{"default for tools without a rule", call{tool: "write", args: at("out.txt")}, Ask, "tools.default"},
		{"default for MCP tools", call{tool: "mcp__github__create_issue", kind: KindNetwork}, Ask, "tools.default"},
	})
	d := g.Evaluate(context.Background(), call{tool: "search_files", args: map[string]any{"pattern": "x"}}.request(ws))
	if d.MaxResults != 100 {
		t.Errorf("search_files MaxResults = %d, want 100", d.MaxResults)
	}
	d = g.Evaluate(context.Background(), call{tool: "read_file", args: at("main.go")}.request(ws))
	if d.MaxBytes != 10<<20 {
		t.Errorf("read_file MaxBytes = %d, want %d", d.MaxBytes, 10<<20)
	}
}

func TestDefaultPolicy(t *testing.T) {
	ws, _ := fixture(t)
	g := NewGate(nil)
	checkDecisions(t, g, ws, []decisionCase{
		{"read-only command", call{tool: "bash", args: sh("ls -la && cat main.go | wc -l")}, Allow, "builtin.classify.read_only"},
		{"read-only git", call{tool: "bash", args: sh("git log --oneline -5")}, Allow, "builtin.classify.read_only"},
		{"git branch listing", call{tool: "bash", args: sh("git branch -a")}, Allow, "builtin.classify.read_only"},
		{"git branch creation", call{tool: "bash", args: sh("git branch feature")}, Ask, "builtin.classify.dangerous"},
		{"git write", call{tool: "bash", args: sh("git push origin main")}, Ask, "builtin.classify.dangerous"},
		{"git config set", call{tool: "bash", args: sh("git config user.name x")}, Ask, "builtin.shell.writes"},
		{"dangerous", call{tool: "bash", args: sh("rm main.go")}, Ask, "builtin.classify.dangerous"},
		{"unclassified", call{tool: "bash", args: sh("frobnicate")}, Ask, "builtin.classify.unclassified"},
		{"forbidden", call{tool: "bash", args: sh("sudo ls")}, Deny, "builtin.classify.forbidden"},
		{"forbidden mkfs", call{tool: "bash", args: sh("ls && mkfs.ext4 /dev/sda1")}, Deny, "builtin.classify.forbidden"},
		{"forbidden in a wrapper", call{tool: "bash", args: sh("timeout 5 shutdown -h now")}, Deny, "builtin.classify.forbidden"},
		{"env leaks secrets", call{tool: "bash", args: sh("env")}, Ask, "builtin.classify.dangerous"},
		// (own) a repository chosen by --git-dir has a config the agent may have written.
		{"git with another git dir", call{tool: "bash", args: sh("git --git-dir=evil status")}, Ask, "builtin.shell.executes"},
		{"git with another work tree", call{tool: "bash", args: sh("git --work-tree sub --git-dir sub/x log")}, Ask, "builtin.shell.executes"},
		{"sed read-only", call{tool: "bash", args: sh("sed -n '1,20p' main.go")}, Allow, "builtin.classify.read_only"},
		{"sed w", call{tool: "bash", args: sh("sed -n 'w out' main.go")}, Ask, "builtin.shell.writes"},
		{"awk read-only", call{tool: "bash", args: sh("awk '{print $1}' main.go")}, Allow, "builtin.classify.read_only"},
		{"write inside", call{tool: "write", args: at("out.txt")}, Allow, "tools.write.action"},
		{"write outside", call{tool: "write", args: at("/etc/out.txt")}, Deny, "builtin.workspace"},
		{"write git config", call{tool: "write", args: at(".git/config")}, Ask, "builtin.protected_paths[0]"},
		{"edit git hook", call{tool: "edit", args: at(".git/hooks/pre-commit")}, Ask, "builtin.protected_paths[1]"},
		{"redirect into the workspace", call{tool: "bash", args: sh("ls > listing.txt")}, Allow, "builtin.classify.read_only"},
		{"unknown tool", call{tool: "mcp__x", kind: "unknown"}, Ask, "exec.ask"},
		{"registered tool without a rule", call{tool: "fetch", kind: KindOther}, Ask, "default"},
		{"network tool", call{tool: "web_fetch", args: map[string]any{"url": "https://docs.python.org/3/"}}, Ask, "kinds.network.action"},
		{"network tool, not http", call{tool: "web_fetch", args: map[string]any{"url": "file:///etc/passwd"}}, Deny, "builtin.network.url"},
		{"network tool, port not allowed", call{tool: "web_fetch", args: map[string]any{"url": "http://example.com:22/"}}, Deny, "network.allow"},
	})
}

func TestAliasesGovernCanonical(t *testing.T) {
	ws := t.TempDir()
	for _, alias := range []string{"run_shell", "exec", "bash"} {
		g := NewGate(mustParse(t, "tools:\n  "+alias+": deny\n"))
		for _, name := range []string{"bash", "run_shell", "exec"} {
			d := g.Evaluate(context.Background(), call{tool: name, args: sh("ls")}.request(ws))
			if d.Action != Deny || d.Rule != "tools."+alias+".action" {
				t.Errorf("rule under %s, call %s: got %s by %s, want deny by tools.%s.action", alias, name, d.Action, d.Rule, alias)
			}
		}
	}
	g := NewGate(mustParse(t, "deny: [write_file]\n"))
	if d := g.Evaluate(context.Background(), call{tool: "write", args: at("x")}.request(ws)); d.Action != Deny {
		t.Errorf("deny: [write_file] on write: got %s", d.Action)
	}
}

func TestOverlaysAndKinds(t *testing.T) {
	ws := t.TempDir()
	doc := `
default: ask
allow: ["kind:read", "mcp__docs__*"]
kinds:
  network: deny
  write:
    action: ask
    approvers: 2
agents:
  "ci-*":
    deny: [bash]
  "ops-*":
    allow: [mcp__deploy]
    tools:
      bash:
        whitelist: ["make *"]
  "*":
    constraints:
      denied_paths: ["secrets/**"]
`
	g := NewGate(mustParse(t, doc))
	checkDecisions(t, g, ws, []decisionCase{
		{"overlay denies", call{agent: "ci-7", tool: "bash", args: sh("ls")}, Deny, "agents.ci-*.deny[0]"},
		{"other agents: bash has no rule, the default asks", call{agent: "dev-1", tool: "bash", args: sh("ls")}, Ask, "default"},
		{"overlay allows a tool", call{agent: "ops-1", tool: "mcp__deploy"}, Allow, "agents.ops-*.allow[0]"},
		{"without the overlay it asks", call{agent: "dev-1", tool: "mcp__deploy"}, Ask, "default"},
		{"overlay whitelist", call{agent: "ops-1", tool: "bash", args: sh("make build")}, Allow, "agents.ops-*.tools.bash.whitelist[0]"},
		{"overlay whitelist is the agent's only", call{agent: "dev-1", tool: "bash", args: sh("make build")}, Ask, "default"},
		{"kind in a list", call{tool: "read", args: at("x.txt")}, Allow, "allow[0]"},
		{"tool glob in a list", call{tool: "mcp__docs__search"}, Allow, "allow[1]"},
		{"kind rule denies", call{tool: "fetch", kind: KindNetwork}, Deny, "kinds.network"},
		{"kind rule asks", call{tool: "write", args: at("x.txt")}, Ask, "kinds.write"},
		{"overlay for every agent", call{agent: "dev-1", tool: "read", args: at("secrets/db.txt")}, Deny, "agents.*.constraints.denied_paths[0]"},
	})
	d := g.Evaluate(context.Background(), call{tool: "write", args: at("x.txt")}.request(ws))
	if d.Approvers != 2 {
		t.Errorf("approvers = %d, want 2", d.Approvers)
	}
}

func TestSeed002Settings(t *testing.T) {
	ws, _ := fixture(t)
	doc := `
tools:
  write: allow
  edit: {enabled: false}
  grep: {auto_execute: true}
  glob: {auto_execute: false}
  bash:
    confirm_dangerous: true
    dangerous_whitelist: ["mkdir -p *"]
    allowed_directories: ["/usr/share/doc"]
exec:
  security: full
`
	g := NewGate(mustParse(t, doc))
	checkDecisions(t, g, ws, []decisionCase{
		{"disabled tool", call{tool: "edit", args: at("x")}, Deny, "tools.edit.enabled"},
		{"auto execute", call{tool: "grep", args: map[string]any{"pattern": "x"}}, Allow, "tools.grep.auto_execute"},
		{"no auto execute", call{tool: "glob", args: map[string]any{"pattern": "*"}}, Ask, "tools.glob.auto_execute"},
		{"dangerous confirmed", call{tool: "bash", args: sh("rm main.go")}, Ask, "tools.bash.confirm_dangerous"},
		{"dangerous whitelisted", call{tool: "bash", args: sh("mkdir -p build")}, Allow, "exec.security"},
		{"full allows the rest", call{tool: "bash", args: sh("frobnicate --now")}, Allow, "exec.security"},
		{"allowed directory", call{tool: "bash", args: sh("cat /usr/share/doc/README")}, Allow, "exec.security"},
		{"outside the allowed directories", call{tool: "bash", args: sh("cat /etc/hostname")}, Ask, "tools.bash.allowed_directories"},
	})
	got := g.AllowedRoots("agent-1", "run_shell")
	if !reflect.DeepEqual(got, []string{"/usr/share/doc"}) {
		t.Errorf("AllowedRoots = %v", got)
	}
}

func TestRuleLimits(t *testing.T) {
	ws := t.TempDir()
	g := NewGate(mustParse(t, `
tools:
  bash:
    action: ask
    timeout: 30s
    approvers: 2
    approval_timeout: 5m
    whitelist: ["ls *"]
`))
	d := g.Evaluate(context.Background(), call{tool: "bash", args: sh("make")}.request(ws))
	if d.Action != Ask || d.Timeout != 30*time.Second || d.Approvers != 2 || d.ApprovalTimeout != 5*time.Minute {
		t.Errorf("ask decision %+v, want timeout 30s, 2 approvers, 5m", d)
	}
	d = g.Evaluate(context.Background(), call{tool: "bash", args: sh("ls")}.request(ws))
	if d.Action != Allow || d.Timeout != 30*time.Second || d.Approvers != 0 || d.ApprovalTimeout != 0 {
		t.Errorf("allow decision %+v, want timeout 30s and no approval fields", d)
	}
	d = NewGate(nil).Evaluate(context.Background(), call{tool: "bash", args: sh("rm x")}.request(ws))
	if d.Approvers != 1 {
		t.Errorf("an ask needs 1 approver by default, got %d", d.Approvers)
	}
}

func TestFailClosed(t *testing.T) {
	ws := t.TempDir()
	g := NewGate(mustParse(t, "default: allow\nexec: {security: full}\n"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if d := g.Evaluate(ctx, call{tool: "mcp__x"}.request(ws)); d.Action != Deny || d.Rule != "builtin.fail_closed" {
		t.Errorf("cancelled context: got %+v, want deny", d)
	}
	checkDecisions(t, g, ws, []decisionCase{
		{"no command", call{tool: "bash", args: map[string]any{}}, Deny, "builtin.arguments"},
		{"command is a number", call{tool: "bash", args: map[string]any{"command": json.Number("7")}}, Deny, "builtin.arguments"},
		{"nil arguments", call{tool: "bash"}, Deny, "builtin.arguments"},
		{"path is a list", call{tool: "read", args: map[string]any{"path": []any{"a"}}}, Deny, "builtin.arguments"},
		{"too long", call{tool: "bash", args: sh(strings.Repeat("ls;", 30000))}, Deny, "builtin.shell.parse"},
		{"too deep", call{tool: "bash", args: sh(`sh -c "sh -c \"sh -c 'sh -c \\\"sh -c ls\\\"'\""`)}, Deny, "builtin.shell.parse"},
	})
	noWS := call{tool: "read", args: at("main.go")}.request("")
	if d := g.Evaluate(context.Background(), noWS); d.Action != Deny {
		t.Errorf("relative path without a workspace: got %s", d.Action)
	}
}

func TestAmendments(t *testing.T) {
	ws, _ := fixture(t)
	g := NewGate(loadPolicy(t, "testdata/seed000.yaml"))
	g.SetAmendments([]Amendment{
		{ID: "am1", Agent: "agent-1", Tool: "bash", CommandPrefix: []string{"git", "push"}, CreatedBy: "alice", Reason: "release"},
		{ID: "am2", Agent: "agent-1", Tool: "write_file", PathPattern: "docs/**", CreatedBy: "bob"},
		{ID: "am3", Agent: "agent-1", Tool: "mcp__tickets", CreatedBy: "carol"},
		{ID: "am4", Agent: "agent-1", Tool: "run_shell", CommandPrefix: []string{"rm"}},
		{ID: "am5", Agent: "agent-1", Tool: "write", PathPattern: "**"},
		{ID: "am6", Agent: "agent-1", Tool: "run_shell", CommandPrefix: []string{"npm", "test"}},
		{ID: "am7", Agent: "agent-1", Tool: "run_shell", CommandPrefix: []string{"make", "test"}},
	})
	checkDecisions(t, g, ws, []decisionCase{
		{"prefix covers", call{tool: "run_shell", args: sh("git push origin main")}, Allow, "amendments[am1]"},
		{"prefix covers with allowed company", call{tool: "run_shell", args: sh("git status && git push")}, Allow, "amendments[am1]"},
		{"prefix through a wrapper", call{tool: "run_shell", args: sh("timeout 60 git push")}, Allow, "amendments[am1]"},
		{"another command asks", call{tool: "run_shell", args: sh("git push && make")}, Ask, "tools.run_shell.action"},
		{"another reason asks", call{tool: "run_shell", args: sh("git push $(cat remote.txt)")}, Ask, "builtin.shell.expansion"},
		{"a write by redirection asks", call{tool: "run_shell", args: sh("git push > log.txt")}, Ask, "tools.default"},
		{"other agent", call{agent: "agent-2", tool: "run_shell", args: sh("git push")}, Ask, "tools.run_shell.action"},
		{"never over a deny", call{tool: "run_shell", args: sh("rm -rf build")}, Deny, "tools.run_shell.blacklist[0]"},
		{"path pattern covers", call{tool: "write", args: at("docs/guide.md")}, Allow, "amendments[am2]"},
		{"another amendment covers", call{tool: "write", args: at("main.go")}, Allow, "amendments[am5]"},
		{"protected path stays an ask", call{tool: "write", args: at(".git/config")}, Ask, "builtin.protected_paths"},
		{"a tool", call{tool: "mcp__tickets"}, Allow, "amendments[am3]"},
		{"npm test", call{tool: "run_shell", args: sh("npm test")}, Allow, "amendments[am6]"},
		{"a setting npm reads is not covered", call{tool: "run_shell", args: sh("npm_config_script_shell=/usr/bin/python3 npm test")}, Ask, "builtin.shell.environment"},
		{"nor through env", call{tool: "run_shell", args: sh("env npm_config_script_shell=/usr/bin/python3 npm test")}, Ask, "builtin.shell.environment"},
		{"nor as npm's own option", call{tool: "run_shell", args: sh("npm test --script-shell=./evil.sh")}, Ask, "builtin.shell."},
		{"nor abbreviated", call{tool: "run_shell", args: sh("npm test --scr ./evil.sh")}, Ask, "builtin.shell."},
		{"nor node options", call{tool: "run_shell", args: sh("npm test --node-options=--require=./x.js")}, Ask, "builtin.shell."},
		{"make test", call{tool: "run_shell", args: sh("make test")}, Allow, "amendments[am7]"},
		{"make variables that run programs", call{tool: "run_shell", args: sh("make test SHELL=./evil.sh")}, Ask, "builtin.shell."},
		{"make --eval", call{tool: "run_shell", args: sh("make test --ev='$(shell id)'")}, Ask, "builtin.shell."},
	})
	g.SetAmendments(nil)
	if d := g.Evaluate(context.Background(), call{tool: "mcp__tickets"}.request(ws)); d.Action != Ask {
		t.Errorf("after revoking: got %s, want ask", d.Action)
	}
	b, err := json.Marshal(Amendment{ID: "x", Agent: "a", Tool: "bash", CommandPrefix: []string{"git", "push"}, CreatedAt: time.Unix(0, 0).UTC()})
	if err != nil || !strings.Contains(string(b), `"command_prefix":["git","push"]`) || !strings.Contains(string(b), `"created_at"`) {
		t.Errorf("amendment JSON %s, %v", b, err)
	}
}

// TestNeutralBuiltins: a whitelist means what it says; the builtins that
// only change the shell's state ride along only where the policy opts in.
func TestNeutralBuiltins(t *testing.T) {
	ws, _ := fixture(t)
	strict := NewGate(mustParse(t, "tools:\n  run_shell:\n    action: ask\n    whitelist: [\"ls *\"]\n"))
	checkDecisions(t, strict, ws, []decisionCase{
		{"whitelisted", call{tool: "run_shell", args: sh("ls -la")}, Allow, "tools.run_shell.whitelist[0]"},
		{"cd is not whitelisted", call{tool: "run_shell", args: sh("cd sub && ls")}, Ask, "tools.run_shell.action"},
		{"printf is not whitelisted", call{tool: "run_shell", args: sh("printf -v x y")}, Ask, "tools.run_shell.action"},
	})
	opted := NewGate(mustParse(t, "tools:\n  run_shell:\n    action: ask\n    neutral_builtins: true\n    whitelist: [\"ls *\"]\n"))
	checkDecisions(t, opted, ws, []decisionCase{
		{"cd rides along", call{tool: "run_shell", args: sh("cd sub && ls")}, Allow, "tools.run_shell."},
		{"echo rides along", call{tool: "run_shell", args: sh("echo done")}, Allow, "tools.run_shell.neutral_builtins"},
		{"but never a name it evaluates", call{tool: "run_shell", args: sh("printf -v 'a[$(id)]' y")}, Ask, "builtin.shell.arithmetic"},
	})
	overlay := NewGate(mustParse(t, "exec:\n  neutral_builtins: true\ntools:\n  run_shell:\n    whitelist: [\"ls *\"]\nagents:\n  \"ci-*\":\n    exec:\n      neutral_builtins: false\n"))
	checkDecisions(t, overlay, ws, []decisionCase{
		{"base opts in", call{tool: "run_shell", args: sh("echo x")}, Allow, "exec.neutral_builtins"},
		{"an overlay opts out", call{agent: "ci-1", tool: "run_shell", args: sh("echo x")}, Ask, ""},
	})
}

func TestCheckPath(t *testing.T) {
	ws, home := fixture(t)
	g := NewGate(loadPolicy(t, "testdata/seed000.yaml"))
	req := call{tool: "read_file"}.request(ws)
	for _, tc := range []struct {
		path string
		want Action
	}{
		{filepath.Join(ws, "main.go"), Allow},
		{filepath.Join(home, ".ssh/id_rsa"), Deny},
		{filepath.Join(ws, "secrets/server.pem"), Deny},
		{filepath.Join(ws, "hard.txt"), Ask},
		{"/etc/passwd", Deny},
		{"main.go", Deny},
	} {
		if d := g.CheckPath(req, tc.path); d.Action != tc.want {
			t.Errorf("CheckPath(%s) = %s (%s), want %s", tc.path, d.Action, d.Reason, tc.want)
		}
	}
	wreq := call{tool: "write"}.request(ws)
	if d := NewGate(nil).CheckPath(wreq, filepath.Join(ws, ".git/config")); d.Action != Ask {
		t.Errorf("CheckPath write .git/config = %s, want ask", d.Action)
	}
}

func TestAllowedRoots(t *testing.T) {
	t.Setenv("HOME", "/home/tester")
	g := NewGate(mustParse(t, `
tools:
  read_file:
    constraints:
      allowed_paths: ["./", "/tmp/", "~/notes", "relative/dir"]
agents:
  "ops-*":
    tools:
      read: {constraints: {allowed_paths: ["/srv/data"]}}
`))
	if got := g.AllowedRoots("dev", "read"); !reflect.DeepEqual(got, []string{"/home/tester/notes", "/tmp"}) {
		t.Errorf("AllowedRoots(dev, read) = %v", got)
	}
	if got := g.AllowedRoots("ops-1", "read_file"); !reflect.DeepEqual(got, []string{"/home/tester/notes", "/srv/data", "/tmp"}) {
		t.Errorf("AllowedRoots(ops-1, read_file) = %v", got)
	}
	if got := g.AllowedRoots("dev", "write"); len(got) != 0 {
		t.Errorf("AllowedRoots(dev, write) = %v, want none", got)
	}
}

// TestHotSwap evaluates while the policy is swapped: every decision comes
// whole from one policy or the other.
func TestHotSwap(t *testing.T) {
	ws := t.TempDir()
	a := mustParse(t, "tools:\n  bash: deny\n")
	b := mustParse(t, "tools:\n  bash:\n    action: ask\n    whitelist: [\"ls *\"]\n")
	g := NewGate(a)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				d := g.Evaluate(context.Background(), call{tool: "bash", args: sh("ls")}.request(ws))
				switch {
				case d.Revision == a.Revision() && d.Action == Deny:
				case d.Revision == b.Revision() && d.Action == Allow:
				default:
					t.Errorf("decision %+v mixes policies %s and %s", d, a.Revision(), b.Revision())
					return
				}
			}
		}()
	}
	for i := 0; i < 200; i++ {
		if i%2 == 0 {
			g.Set(b)
		} else {
			g.Set(a)
		}
	}
	close(stop)
	wg.Wait()
	if g.Set(nil); g.Policy() != Default() {
		t.Error("Set(nil) does not install the default policy")
	}
}
