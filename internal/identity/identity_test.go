package identity_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/internal/testenv"
)

func TestStateDir(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv(identity.EnvStateDir, "")
	t.Setenv("XDG_STATE_HOME", "")
	got, err := identity.StateDir()
	if err != nil || got != filepath.Join(home, ".local", "state", "toolgate") {
		t.Fatalf("StateDir() = %q, %v", got, err)
	}
	if fi, err := os.Stat(got); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("state dir mode: %v %v", fi.Mode(), err)
	}
	xdg := t.TempDir()
	t.Setenv("XDG_STATE_HOME", xdg)
	if got, _ := identity.StateDir(); got != filepath.Join(xdg, "toolgate") {
		t.Fatalf("with XDG_STATE_HOME: %q", got)
	}
	t.Setenv("XDG_STATE_HOME", "relative/path") // the spec says ignore it
	if got, _ := identity.StateDir(); got != filepath.Join(home, ".local", "state", "toolgate") {
		t.Fatalf("with a relative XDG_STATE_HOME: %q", got)
	}
}

func TestLoadOrCreateConcurrentFirstStarts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	const n = 8
	keys := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in, err := identity.LoadOrCreate(dir)
			if err != nil {
				t.Error(err)
				return
			}
			keys[i] = in.OperatorPublicKey + in.AccountPublicKey + in.SystemPublicKey
		}()
	}
	wg.Wait()
	for i := 1; i < n; i++ {
		if keys[i] != keys[0] {
			t.Fatalf("first starts disagree on the keys: %q vs %q", keys[i], keys[0])
		}
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Fatalf("keys dir mode %v", fi.Mode())
	}
	ents, _ := os.ReadDir(dir)
	seeds := 0
	for _, e := range ents {
		fi, _ := e.Info()
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", e.Name(), fi.Mode())
		}
		if strings.HasSuffix(e.Name(), ".nk") {
			seeds++
		}
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("left a temp file %s", e.Name())
		}
	}
	if seeds != 4 {
		t.Fatalf("%d seed files, want 4", seeds)
	}
}

func TestMintAndParse(t *testing.T) {
	in, err := identity.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range identity.Roles {
		b, err := in.Mint(r, "x-1")
		if err != nil {
			t.Fatal(err)
		}
		c, err := identity.ParseCreds(b)
		if err != nil {
			t.Fatal(err)
		}
		account := in.AccountPublicKey // toolgate's services
		if r == identity.RoleAgent {
			account = in.AgentsPublicKey // agents apart
		}
		if c.Role != r || c.Name != "x-1" || c.Account != account || c.Claims.Issuer != account ||
			!c.Claims.Tags.Contains("toolgate-role:"+string(r)) {
			t.Fatalf("%s: parsed %+v", r, c)
		}
		// Whose workers and admins it deals with: the toolgate account,
		// also for an agent, whose JWT names it.
		if c.Services != in.AccountPublicKey {
			t.Fatalf("%s: services account %q, want the toolgate account %q", r, c.Services, in.AccountPublicKey)
		}
	}
	for _, name := range []string{"", "a.b", "a*", "a>", "a b", "ä", strings.Repeat("a", 129)} {
		if _, err := in.Mint(identity.RoleAgent, name); !errors.Is(err, identity.ErrBadName) {
			t.Errorf("Mint(agent, %q) = %v, want ErrBadName", name, err)
		}
	}
	if _, err := in.Mint("root", "x"); !errors.Is(err, identity.ErrBadRole) {
		t.Errorf("Mint(root) = %v", err)
	}
}

func TestParseCredsRefusesAndNeverQuotes(t *testing.T) {
	in, _ := identity.LoadOrCreate(t.TempDir())
	good, _ := in.Mint(identity.RoleAgent, "a")
	other, _ := in.Mint(identity.RoleAgent, "b")
	seed := string(good[bytes.Index(good, []byte("SU")):][:58])
	mixed := append(bytes.Clone(good[:bytes.Index(good, []byte("-----BEGIN USER NKEY"))]), other[bytes.Index(other, []byte("-----BEGIN USER NKEY")):]...)
	cases := map[string][]byte{
		"empty":        nil,
		"garbage":      []byte("hello " + seed),
		"seed only":    good[bytes.Index(good, []byte("-----BEGIN USER NKEY")):],
		"foreign seed": mixed,
		"tampered JWT": bytes.Replace(good, []byte("eyJ"), []byte("eyK"), 2),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := identity.ParseCreds(b)
			if !errors.Is(err, identity.ErrBadCreds) {
				t.Fatalf("err = %v, want ErrBadCreds", err)
			}
			if strings.Contains(err.Error(), seed) || strings.Contains(err.Error(), "SU") {
				t.Fatalf("error quotes the secret: %v", err)
			}
		})
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":               "nats://127.0.0.1:4222",
		"nats://worker:s3cret@node-a:4222":    "nats://worker:***@node-a:4222",
		"nats://tok3n@node-a:4222":            "nats://***@node-a:4222",
		"nats://w:p@a:4222,nats://w:p@b:4222": "nats://w:***@a:4222,nats://w:***@b:4222",
		"tls://u:p%40ss@h:4222":               "tls://u:***@h:4222",
		"nats://u:pa@ss@h:4222":               "nats://u:***@h:4222",
		"node-a:4222":                         "node-a:4222",
		"user:secret@node-a:4222":             "user:***@node-a:4222",
	} {
		if got := identity.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCheckOutside(t *testing.T) {
	ws := t.TempDir()
	out := t.TempDir()
	link := filepath.Join(out, "link")
	if err := os.Symlink(ws, link); err != nil {
		t.Fatal(err)
	}
	// A link inside the workspace to a file outside it: the agent can
	// point the link elsewhere, so what it names is the agent's to choose.
	if err := os.WriteFile(filepath.Join(out, "policy.yaml"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wsLink := filepath.Join(ws, "policy.yaml")
	if err := os.Symlink(filepath.Join(out, "policy.yaml"), wsLink); err != nil {
		t.Fatal(err)
	}
	// A chain out -> ws -> out passes through the workspace.
	chain := filepath.Join(out, "chain")
	if err := os.Symlink(wsLink, chain); err != nil {
		t.Fatal(err)
	}
	rel := filepath.Join(out, "rel")
	if err := os.Symlink("policy.yaml", rel); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		in   bool
	}{
		{ws, true},
		{filepath.Join(ws, ".toolgate"), true},
		{filepath.Join(ws, "a", "b", "not-yet"), true},
		{filepath.Join(link, "state"), true}, // through a symbolic link
		{filepath.Join(ws, "..", filepath.Base(ws)+"x"), false},
		{out, false},
		{wsLink, true},
		{chain, true},
		{rel, false},
		{filepath.Join(out, "policy.yaml"), false},
	} {
		err := identity.CheckOutside("--data", c.path, ws)
		if got := errors.Is(err, identity.ErrInWorkspace); got != c.in {
			t.Errorf("CheckOutside(%q) = %v, want inside=%v", c.path, err, c.in)
		}
	}
}

// The permissions name internal/bus's streams and buckets.
func TestPermissionsNameTheBus(t *testing.T) {
	all := ""
	for _, r := range identity.Roles {
		p := identity.Permissions(r, "n")
		all += strings.Join(p.Pub.Allow, " ") + " " + strings.Join(p.Sub.Allow, " ") + " "
	}
	for _, name := range []string{bus.StreamCalls, bus.StreamApprovals, bus.ConsumerWorkers,
		bus.ConsumerApprover, bus.BucketCalls, bus.BucketPolicy, bus.BucketApprovals, bus.StreamTasks,
		bus.BucketTasks, bus.BucketCache} {
		if !strings.Contains(all, name) {
			t.Errorf("no permission names %s", name)
		}
	}
}

func TestUnauthenticatedAndForeignClientsAreRefused(t *testing.T) {
	s := testenv.StartAuthNATS(t)
	if _, err := nats.Connect(s.ClientURL()); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("connect without credentials: %v, want an authorization violation", err)
	}
	if _, err := nats.Connect(s.ClientURL(), nats.UserInfo("worker", "worker")); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("connect with a password: %v, want an authorization violation", err)
	}
	other, _ := identity.LoadOrCreate(t.TempDir())
	foreign, _ := other.MintCreds(identity.RoleWorker, "worker")
	if _, err := nats.Connect(s.ClientURL(), foreign.NATSOptions()...); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("connect with another install's worker: %v, want an authorization violation", err)
	}
}

// TestRevokedAndExpiredCredentialsAreRefused: a revoked user is refused
// by a server trusting the reissued account JWT, as is an expired one;
// fresh credentials still work.
func TestRevokedAndExpiredCredentialsAreRefused(t *testing.T) {
	s := testenv.StartAuthNATS(t)
	revoked, _ := s.Install.MintCreds(identity.RoleAgent, "leaked")
	expiring, err := s.Install.MintExpiring(identity.RoleAgent, "brief", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	exp, _ := identity.ParseCreds(expiring)
	if err := s.Install.Revoke(revoked.Claims.Subject); err != nil {
		t.Fatal(err)
	}
	if err := s.Install.Revoke("not-a-key"); !errors.Is(err, identity.ErrBadCreds) {
		t.Fatalf("Revoke(garbage) = %v", err)
	}
	// The embedded server applies it at its next start: reload the install
	// from its keys, as a restart does, and start a server trusting it.
	in, err := identity.LoadOrCreate(s.Install.Dir)
	if err != nil {
		t.Fatal(err)
	}
	j, err := in.JWTs()
	if err != nil {
		t.Fatal(err)
	}
	ac, err := jwt.DecodeAccountClaims(j.Account)
	if err != nil || !ac.IsClaimRevoked(revoked.Claims) {
		t.Fatalf("the reissued account JWT does not revoke the user: %v", err)
	}
	restarted := testenv.StartAuthNATSWith(t, in)
	if _, err := nats.Connect(restarted.ClientURL(), revoked.NATSOptions()...); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("revoked credentials: %v, want an authorization violation", err)
	}
	fresh, _ := in.MintCreds(identity.RoleAgent, "leaked")
	nc, err := nats.Connect(restarted.ClientURL(), fresh.NATSOptions()...)
	if err != nil {
		t.Fatalf("fresh credentials of the same agent: %v", err)
	}
	nc.Close()
	if d := time.Until(time.Unix(exp.Claims.Expires, 0)); d <= 0 || d > time.Hour {
		t.Fatalf("MintExpiring(1h): expires in %v", d)
	}
	// Credentials past their expiry, signed like the install's own.
	ukp, _ := nkeys.CreateUser()
	upub, _ := ukp.PublicKey()
	uc := jwt.NewUserClaims(upub)
	uc.Name, uc.Expires = "brief", time.Now().Add(-time.Minute).Unix()
	uc.Tags.Add(identity.RoleAgent.Tag())
	uc.Permissions = identity.Permissions(identity.RoleAgent, "brief")
	tok, _ := uc.Encode(in.Account)
	seed, _ := ukp.Seed()
	b, _ := jwt.FormatUserConfig(tok, seed)
	expired, err := identity.ParseCreds(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nats.Connect(restarted.ClientURL(), expired.NATSOptions()...); err == nil {
		t.Fatal("expired credentials were accepted")
	}
}

// TestUpgradeFromOneAccount: an install made before agents had their own
// account (no agents.nk) gets one at its next load, and every user JWT
// issued until then is refused: an old agent's was the toolgate
// account's, with the old permissions. What is minted afterwards works.
func TestUpgradeFromOneAccount(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	old, err := identity.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "agents.nk")); err != nil {
		t.Fatal(err)
	}
	oldCreds, err := old.MintCreds(identity.RoleWorker, "w")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // revocations have a resolution of one second
	in, err := identity.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if in.AgentsPublicKey == old.AgentsPublicKey || in.AccountPublicKey != old.AccountPublicKey {
		t.Fatal("the upgrade did not create an agents account beside the old ones")
	}
	s := testenv.StartAuthNATSWith(t, in)
	if nc, err := nats.Connect(s.ClientURL(), oldCreds.NATSOptions()...); err == nil {
		nc.Close()
		t.Fatal("credentials minted before the upgrade were let in")
	}
	for _, r := range []identity.Role{identity.RoleWorker, identity.RoleAgent} {
		c, err := in.MintCreds(r, "n")
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(s.ClientURL(), c.NATSOptions()...)
		if err != nil {
			t.Fatalf("%s minted after the upgrade: %v", r, err)
		}
		nc.Close()
	}
}

// TestAuthorizationViolationSaysWhatToDo: credentials of another install
// than the server's are refused with a message naming where they came
// from (a file, or the state directory) and what to do, not a bare
// "nats: authorization violation".
func TestAuthorizationViolationSaysWhatToDo(t *testing.T) {
	s := testenv.StartAuthNATS(t) // trusts an install of its own, not the state directory's
	state, err := identity.StatePath()
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = identity.Dial(s.ClientURL(), "", identity.RoleAgent, "a")
	if !errors.Is(err, nats.ErrAuthorization) || !strings.Contains(err.Error(), "minted from the state directory "+state) ||
		!strings.Contains(err.Error(), identity.EnvStateDir) || !strings.Contains(err.Error(), "--creds") {
		t.Fatalf("minted credentials refused: %v", err)
	}
	other, _ := identity.LoadOrCreate(t.TempDir())
	foreign, _ := other.MintCreds(identity.RoleAgent, "a")
	b, err := foreign.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "a.creds")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = identity.Dial(s.ClientURL(), file, identity.RoleAgent, "a")
	if !errors.Is(err, nats.ErrAuthorization) || !strings.Contains(err.Error(), "refused the credentials in "+file) {
		t.Fatalf("a foreign credentials file refused: %v", err)
	}
}
