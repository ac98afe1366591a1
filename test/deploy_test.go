package test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/pkg/events"
)

// passwordUsers are the users of deploy/nats/accounts.conf, the password
// alternative to operator mode: role, name, password variable.
var passwordUsers = []struct {
	role       identity.Role
	name, pass string
	comment    string
}{
	{identity.RoleWorker, "worker", "TOOLGATE_WORKER_PASSWORD", "Workers: consume calls, publish results, provision the bus."},
	{identity.RoleApprover, "approver", "TOOLGATE_APPROVER_PASSWORD", "The approver service: reads parked calls, publishes decisions."},
	{identity.RoleAdmin, "admin", "TOOLGATE_ADMIN_PASSWORD", "People at toolctl: policy push, amendments, events."},
	{identity.RoleTool, "word_count", "TOOLGATE_WORD_COUNT_PASSWORD", "One block per remote tool service: word_count answers discovery and the calls to\n      # toolgate.remote.word_count, and publishes nothing but its replies."},
	{identity.RoleHook, "no_force_push", "TOOLGATE_NO_FORCE_PUSH_PASSWORD", "One block per tool hook service: no_force_push answers the requests to\n      # toolgate.hook.no_force_push, and publishes nothing but its replies."},
	{identity.RoleAgent, "agent-7", "TOOLGATE_AGENT7_PASSWORD", "One block per agent: agent-7 calls tools as agent-7 only, reads only its own\n      # results, and must use the inbox prefix _INBOX_agent-7 (nats.go CustomInboxPrefix)."},
}

func quoteList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// accountsConf renders the password accounts with exactly the
// permissions the operator-mode user JWTs carry.
func accountsConf() string {
	var b strings.Builder
	b.WriteString(`# toolgate accounts with passwords, for a NATS cluster that cannot run in
# operator mode. The recommended set-up is operator mode: ` + "`toolctl nats-config`" + `
# writes auth.conf (see cluster-node.conf and ../README.md). Include one of
# the two from each server's configuration, not both.
#
# Generated from the roles' permissions (go test ./test -run TestDeploy -update):
# they are the ones the operator-mode user JWTs carry. Passwords come from
# the environment of nats-server: an unquoted $VAR is looked up there
# ("$VAR" in quotes would be the literal text). Clients put the password in
# the URL: nats://worker:PASSWORD@node-a:4222.
#
# Two accounts, as in operator mode: TOOLGATE (workers, approvers, admins,
# tool and hook services, JetStream) and AGENTS (agents, no JetStream),
# joined only by the exports and imports below (identity.Crossings).

accounts: {
  TOOLGATE: {
`)
	l := identity.DefaultJetStreamLimits
	fmt.Fprintf(&b, "    jetstream: { max_file: %d, max_mem: %d, max_streams: %d, max_consumers: %d, max_ack_pending: %d }\n",
		l.DiskStorage, l.MemoryStorage, l.Streams, l.Consumers, l.MaxAckPending)
	b.WriteString("    exports: [\n")
	for _, c := range identity.Crossings {
		fmt.Fprintf(&b, "      # %s\n      { %s: %q }\n", c.Why, crossingKind(c), c.Exported())
	}
	b.WriteString("    ]\n    users: [\n")
	users := func(agents bool) {
		for _, u := range passwordUsers {
			if (u.role == identity.RoleAgent) == agents {
				user(&b, u.role, u.name, u.pass, u.comment)
			}
		}
	}
	users(false)
	b.WriteString("    ]\n  }\n  AGENTS: {\n    imports: [\n")
	for _, c := range identity.Crossings {
		if c.Into != "" {
			fmt.Fprintf(&b, "      { %s: { account: TOOLGATE, subject: %q }, to: %q }\n", crossingKind(c), c.Exported(), c.Subject)
			continue
		}
		fmt.Fprintf(&b, "      { %s: { account: TOOLGATE, subject: %q } }\n", crossingKind(c), c.Subject)
	}
	b.WriteString("    ]\n    users: [\n")
	users(true)
	b.WriteString(`    ]
  }
  SYS: { users: [ { user: sys, password: $NATS_SYS_PASSWORD } ] }
}
system_account: SYS
`)
	return b.String()
}

// crossingKind is the configuration's word for c: service or stream.
func crossingKind(c identity.Crossing) string {
	if c.Service {
		return "service"
	}
	return "stream"
}

// user renders one password user with its role's permissions.
func user(b *strings.Builder, role identity.Role, name, pass, comment string) {
	p := identity.Permissions(role, name)
	fmt.Fprintf(b, "      # %s\n", comment)
	fmt.Fprintf(b, "      { user: %q, password: $%s,\n        permissions: {\n", name, pass)
	if len(p.Pub.Deny) > 0 {
		fmt.Fprintf(b, "          publish: { deny: [ %s ] }\n", quoteList(p.Pub.Deny))
	} else {
		fmt.Fprintf(b, "          publish: { allow: [ %s ] }\n", quoteList(p.Pub.Allow))
	}
	fmt.Fprintf(b, "          subscribe: { allow: [ %s ] }\n", quoteList(p.Sub.Allow))
	if p.Resp != nil {
		fmt.Fprintf(b, "          allow_responses: { max: %d, expires: %q }\n", p.Resp.MaxMsgs, p.Resp.Expires.String())
	}
	b.WriteString("        } }\n\n")
}

// TestDeployAccountsConf: deploy/nats/accounts.conf is what the roles'
// permissions say, nats-server reads it, its passwords come from the
// environment (not the literal "$VAR"), and each user's permissions are
// the user JWT's.
func TestDeployAccountsConf(t *testing.T) {
	path := filepath.Join("..", "deploy", "nats", "accounts.conf")
	want := accountsConf()
	if *updateSchemas {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s is not what the permissions say; run go test ./test -run TestDeploy -update", path)
	}
	for _, u := range passwordUsers {
		t.Setenv(u.pass, "pw-of-"+u.name)
	}
	t.Setenv("NATS_SYS_PASSWORD", "pw-of-sys")
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server cannot read %s: %v", path, err)
	}
	for _, u := range passwordUsers {
		var su *server.User
		for _, x := range opts.Users {
			if x.Username == u.name {
				su = x
			}
		}
		if su == nil {
			t.Fatalf("no user %s", u.name)
		}
		if su.Password != "pw-of-"+u.name {
			t.Errorf("user %s: password %q is not taken from $%s", u.name, su.Password, u.pass)
		}
		p := identity.Permissions(u.role, u.name)
		if !slices.Equal(su.Permissions.Publish.Allow, []string(p.Pub.Allow)) ||
			!slices.Equal(su.Permissions.Publish.Deny, []string(p.Pub.Deny)) ||
			!slices.Equal(su.Permissions.Subscribe.Allow, []string(p.Sub.Allow)) ||
			(p.Resp == nil) != (su.Permissions.Response == nil) ||
			p.Resp != nil && (su.Permissions.Response.MaxMsgs != p.Resp.MaxMsgs || su.Permissions.Response.Expires != p.Resp.Expires) {
			t.Errorf("user %s: permissions differ from the user JWT's:\n%+v\n%+v", u.name, su.Permissions, p)
		}
	}
	// Served: the agent crosses into the toolgate account by the
	// exports only, and an answer to it never lands where it points its
	// reply subject.
	opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", -1, true, true
	opts.JetStream, opts.StoreDir = true, t.TempDir()
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	defer srv.Shutdown()
	conn := func(user, inbox string) *nats.Conn {
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, "pw-of-"+user), nats.CustomInboxPrefix(inbox))
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	worker := conn("worker", identity.InboxPrefix(identity.RoleWorker, "worker"))
	admin := conn("admin", identity.InboxPrefix(identity.RoleAdmin, "admin"))
	agent := conn("agent-7", identity.InboxPrefix(identity.RoleAgent, "agent-7"))
	if _, err := worker.Subscribe(events.SubjectToolsList, func(m *nats.Msg) { _ = m.Respond([]byte("listing")) }); err != nil {
		t.Fatal(err)
	}
	spy, err := admin.SubscribeSync("toolgate.result.>")
	if err != nil {
		t.Fatal(err)
	}
	_ = worker.Flush()
	_ = admin.Flush()
	if m, err := agent.Request(events.SubjectToolsList, nil, 5*time.Second); err != nil || string(m.Data) != "listing" {
		t.Fatalf("agent-7 lists the tools across the accounts: %v %v", m, err)
	}
	_ = agent.PublishRequest(events.SubjectToolsList, "toolgate.result.bob.c1", nil)
	_ = agent.Flush()
	if m, err := spy.NextMsg(time.Second); err == nil {
		t.Fatalf("an answer to agent-7 landed on %s in the toolgate account", m.Subject)
	}
	if m, err := agent.Request("$JS.API.INFO", nil, 2*time.Second); err == nil && !strings.Contains(string(m.Data), "not enabled") {
		t.Fatalf("agent-7 reaches JetStream: %s", m.Data)
	}
}

// TestDeployAuthConf: what `toolctl nats-config` writes is an include
// nats-server reads, trusting the install's operator, with both accounts
// preloaded, and the creds beside it are the install's users.
func TestDeployAuthConf(t *testing.T) {
	dir := t.TempDir()
	o, e, code := (&process{}).toolctl(t, "nats-config", "--out", dir)
	if code != 0 {
		t.Fatalf("nats-config: %d\n%s\n%s", code, o, e)
	}
	in, err := identity.LoadInstall()
	if err != nil {
		t.Fatal(err)
	}
	node := filepath.Join(dir, "node.conf")
	writeFile(t, node, "listen: 127.0.0.1:-1\njetstream { store_dir: "+fmt.Sprintf("%q", filepath.Join(dir, "js"))+" }\ninclude ./auth.conf\n")
	opts, err := server.ProcessConfigFile(node)
	if err != nil {
		t.Fatalf("nats-server cannot read the include: %v", err)
	}
	if len(opts.TrustedOperators) != 1 || opts.TrustedOperators[0].Subject != in.OperatorPublicKey || opts.SystemAccount != in.SystemPublicKey {
		t.Fatalf("auth.conf trusts %+v, system account %s", opts.TrustedOperators, opts.SystemAccount)
	}
	for _, r := range []identity.Role{identity.RoleWorker, identity.RoleApprover, identity.RoleAdmin} {
		f := filepath.Join(dir, string(r)+".creds")
		fi, err := os.Stat(f)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", f, fi, err)
		}
		c, err := identity.LoadCreds(f)
		if err != nil || c.Role != r || c.Account != in.AccountPublicKey {
			t.Fatalf("%s: %+v %v", f, c, err)
		}
	}
	// The agents account is preloaded too, and the toolgate account
	// carries JetStream limits.
	j, err := in.JWTs()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "auth.conf"))
	if !strings.Contains(string(b), "# agents") {
		t.Error("auth.conf lacks the agents account's comment")
	}
	// The preloaded JWT is the agents account's as the install signs it
	// (signed when nats-config ran: its issue time may differ).
	_, preloaded, _ := strings.Cut(string(b), in.AgentsPublicKey+": ")
	preloaded, _, _ = strings.Cut(preloaded, "\n")
	got, err := jwt.DecodeAccountClaims(strings.Trim(strings.TrimSpace(preloaded), `"`))
	if err != nil {
		t.Fatalf("auth.conf's agents account JWT: %v", err)
	}
	want, err := jwt.DecodeAccountClaims(j.Agents)
	if err != nil {
		t.Fatal(err)
	}
	got.IssuedAt, got.ID, want.IssuedAt, want.ID = 0, "", 0, ""
	if g, w := got.String(), want.String(); g != w {
		t.Errorf("auth.conf preloads the agents account as\n%s\nwant\n%s", g, w)
	}
	if nkeySeed.Match(b) {
		t.Fatal("auth.conf holds a seed")
	}
}
