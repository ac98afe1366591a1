package toolctl

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nkeys"
	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/internal/bearer"
	"github.com/toolgate/toolgate/internal/identity"
)

// cmdCreds mints users of the install in the state directory, and bearer
// tokens for the HTTP faces. Secrets go to files of mode 0600: --out FILE,
// --out-dir DIR (one NAME.creds per name), else a path under the state
// directory, which is printed; to standard output only with --out -, and
// never to a terminal.
func cmdCreds(_ context.Context, env *Env, args []string) int {
	fs := flag.NewFlagSet("creds", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	out := fs.String("out", "", "write the secret to this file (mode 0600); - prints it (refused on a terminal); default under the state directory")
	outDir := fs.String("out-dir", "", "write NAME.creds for each NAME into this directory (made mode 0700; files 0600)")
	expires := fs.Duration("expires", 0, "the credentials stop working after this long (default never)")
	fs.Usage = func() {
		fmt.Fprintln(env.Stderr, "usage: toolctl creds agent|approver|admin|worker|tool|hook NAME... [--out FILE|-] [--out-dir DIR] [--expires DURATION]")
		fmt.Fprintln(env.Stderr, "       toolctl creds token AGENT [--out FILE|-]")
		fmt.Fprintln(env.Stderr, "       toolctl creds login PERSON... [--out FILE|-]")
		fmt.Fprintln(env.Stderr, "       toolctl creds revoke FILE|USER_PUBLIC_KEY|ROLE NAME")
		fmt.Fprintln(env.Stderr, "  writes a NATS .creds file (a secret, mode 0600) issued by this install's account of the role (agents, or toolgate),")
		fmt.Fprintln(env.Stderr, "  by default to <state dir>/creds/ROLE-NAME.creds (the path is printed);")
		fmt.Fprintln(env.Stderr, "  an agent's lets it call tools as NAME only and read only its own results;")
		fmt.Fprintln(env.Stderr, "  a tool's lets a remote tool service serve the tool NAME and nothing else;")
		fmt.Fprintln(env.Stderr, "  a hook's lets a tool hook service answer on toolgate.hook.NAME and nothing else.")
		fmt.Fprintln(env.Stderr, "  token: a bearer token of AGENT for the HTTP faces (worker --mcp-listen, toolctl hook serve);")
		fmt.Fprintln(env.Stderr, "  only its hash is kept (<state dir>/tokens), minting again replaces it.")
		fmt.Fprintln(env.Stderr, "  login: a login token of each PERSON for the approver's page, as `<person> <token>` lines of the")
		fmt.Fprintln(env.Stderr, "  approver's --token-file (default <state dir>/creds/approver-tokens); other people's lines are kept,")
		fmt.Fprintln(env.Stderr, "  PERSON's previous token is replaced.")
		fmt.Fprintln(env.Stderr, "  revoke: the embedded server refuses them from its next start; a cluster once it")
		fmt.Fprintln(env.Stderr, "  loads the auth.conf that toolctl nats-config writes afterwards")
		fs.PrintDefaults()
	}
	var pos []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return ExitUsage
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) < 2 {
		fs.Usage()
		return ExitUsage
	}
	kind, names := pos[0], pos[1:]
	if kind == "revoke" {
		switch len(names) {
		case 1:
			return revoke(env, names[0])
		case 2: // ROLE NAME: the file minted to the default path
			state, err := identity.StatePath()
			if err != nil {
				return env.fail(ExitFailed, "%v", err)
			}
			return revoke(env, filepath.Join(state, "creds", defaultCredsFile(names[0], names[1])))
		}
		fs.Usage()
		return ExitUsage
	}
	if len(names) > 1 && *outDir == "" && kind != "login" {
		return env.fail(ExitUsage, "creds: several names want --out-dir DIR (one NAME.creds each)")
	}
	if *out != "" && *outDir != "" {
		return env.fail(ExitUsage, "creds: give --out or --out-dir, not both")
	}
	for _, n := range names {
		if err := identity.ValidName(n); err != nil {
			return env.fail(ExitUsage, "%v", err)
		}
	}
	if kind == "login" {
		if *outDir != "" || *expires != 0 {
			return env.fail(ExitUsage, "creds login: PERSON..., with --out FILE|- at most")
		}
		return mintLogins(env, names, *out)
	}
	if kind == "token" || kind == "mcp-token" {
		if len(names) != 1 || *outDir != "" || *expires != 0 {
			return env.fail(ExitUsage, "creds token: one AGENT, with --out FILE|- at most")
		}
		return mintToken(env, names[0], *out)
	}
	role, err := identity.ParseRole(kind)
	if err != nil {
		return env.fail(ExitUsage, "%v (or token, login)", err)
	}
	if *out == "-" && !stdoutSafe(env) {
		return env.fail(ExitUsage, "creds: --out - would print a secret to a terminal; give --out FILE, or redirect standard output to a file")
	}
	in, err := identity.LoadInstall()
	if err != nil {
		return env.fail(ExitFailed, "%v", err)
	}
	dir := *outDir
	if dir != "" {
		if err := secretDir(dir); err != nil {
			return env.fail(ExitFailed, "--out-dir: %v", err)
		}
	}
	for _, name := range names {
		b, err := in.MintExpiring(role, name, *expires)
		if err != nil {
			return env.fail(ExitFailed, "%v", err)
		}
		path := *out
		if dir != "" {
			path = filepath.Join(dir, name+".creds")
		}
		written, code := emitSecret(env, path, defaultCredsFile(string(role), name), b)
		if code != ExitOK {
			return code
		}
		if written != "" {
			fmt.Fprintf(env.Stderr, "toolctl: wrote %s credentials for %q to %s (mode 0600)\n", role, name, written)
		}
	}
	return ExitOK
}

// mintToken mints AGENT's bearer token for the HTTP faces, keeping its
// hash in the state directory's token directory.
func mintToken(env *Env, agent, out string) int {
	if out == "-" && !stdoutSafe(env) {
		return env.fail(ExitUsage, "creds token: --out - would print a secret to a terminal; give --out FILE, or redirect standard output to a file")
	}
	dir, err := bearer.DefaultDir()
	if err != nil {
		return env.fail(ExitFailed, "%v", err)
	}
	tok, err := bearer.Mint(dir, agent)
	if err != nil {
		return env.fail(ExitFailed, "%v", err)
	}
	written, code := emitSecret(env, out, "agent-"+agent+".token", []byte(tok+"\n"))
	if code != ExitOK {
		return code
	}
	if written != "" {
		fmt.Fprintf(env.Stderr, "toolctl: wrote a bearer token of agent %q to %s (mode 0600); it replaces the agent's previous token; clients send Authorization: Bearer <the file's content>\n", agent, written)
	}
	return ExitOK
}

// mintLogins writes a new login token for each person into the approver's
// token file out (`<person> <token>` lines, mode 0600), keeping the lines
// of other people and comments, replacing the persons' previous lines.
func mintLogins(env *Env, people []string, out string) int {
	if out == "-" && !stdoutSafe(env) {
		return env.fail(ExitUsage, "creds login: --out - would print a secret to a terminal; give --out FILE, or redirect standard output to a file")
	}
	if out == "" {
		state, err := identity.StateDir()
		if err != nil {
			return env.fail(ExitFailed, "%v", err)
		}
		dir := filepath.Join(state, "creds")
		if err := secretDir(dir); err != nil {
			return env.fail(ExitFailed, "%v", err)
		}
		out = filepath.Join(dir, "approver-tokens")
	}
	var kept []string
	if out != "-" {
		old, err := os.ReadFile(out)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return env.fail(ExitFailed, "creds login: %v", err)
		}
		for _, l := range strings.Split(strings.TrimRight(string(old), "\n"), "\n") {
			if f := strings.Fields(l); l != "" && (len(f) == 0 || !slices.Contains(people, f[0])) {
				kept = append(kept, l)
			}
		}
	}
	if len(kept) == 0 {
		kept = append(kept, "# approver tokens: <identity> <token>, one per line")
	}
	for _, p := range people {
		tok := make([]byte, 24)
		if _, err := rand.Read(tok); err != nil {
			return env.fail(ExitFailed, "creds login: %v", err)
		}
		kept = append(kept, p+" "+base64.RawURLEncoding.EncodeToString(tok))
	}
	b := []byte(strings.Join(kept, "\n") + "\n")
	if out == "-" {
		_, _ = env.Stdout.Write(b)
		return ExitOK
	}
	if err := writeSecret(out, b); err != nil {
		return env.fail(ExitFailed, "creds login: %v", err)
	}
	fmt.Fprintf(env.Stderr, "toolctl: wrote login tokens of %s to %s (mode 0600): the approver's --token-file; each person logs in with the token on their line\n",
		strings.Join(people, ", "), out)
	return ExitOK
}

// defaultCredsFile is the name of role NAME's .creds file in the state
// directory's creds directory.
func defaultCredsFile(role, name string) string { return role + "-" + name + ".creds" }

// emitSecret writes b to path (0600), to standard output for "-", or,
// when path is empty, to <state dir>/creds/def whose path it prints on
// standard output. It returns the file written ("" for standard output).
func emitSecret(env *Env, path, def string, b []byte) (string, int) {
	switch path {
	case "-":
		_, _ = env.Stdout.Write(b)
		return "", ExitOK
	case "":
		state, err := identity.StateDir()
		if err != nil {
			return "", env.fail(ExitFailed, "%v", err)
		}
		dir := filepath.Join(state, "creds")
		if err := secretDir(dir); err != nil {
			return "", env.fail(ExitFailed, "%v", err)
		}
		path = filepath.Join(dir, def)
		if err := writeSecret(path, b); err != nil {
			return "", env.fail(ExitFailed, "%v", err)
		}
		fmt.Fprintln(env.Stdout, path)
		return path, ExitOK
	}
	if err := writeSecret(path, b); err != nil {
		return "", env.fail(ExitFailed, "%v", err)
	}
	return path, ExitOK
}

// stdoutSafe reports whether standard output may carry a secret: it is
// not a terminal, where it would stay on screen and in scrollback.
func stdoutSafe(env *Env) bool {
	f, ok := env.Stdout.(*os.File)
	if !ok {
		return true
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), ioctlGetTermios)
	return err != nil
}

// secretDir makes dir (mode 0700) when it does not exist.
func secretDir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	return os.MkdirAll(dir, 0o700)
}

// revoke revokes the user of a .creds file or a user public key.
func revoke(env *Env, what string) int {
	pub := what
	if !nkeys.IsValidPublicUserKey(what) {
		c, err := identity.LoadCreds(what)
		if err != nil {
			return env.fail(ExitUsage, "revoke: give a .creds file or a user public key (U...): %v", err)
		}
		pub = c.Claims.Subject
	}
	in, err := identity.LoadInstall()
	if err != nil {
		return env.fail(ExitFailed, "%v", err)
	}
	if err := in.Revoke(pub); err != nil {
		return env.fail(ExitFailed, "%v", err)
	}
	fmt.Fprintf(env.Stdout, "revoked %s: the embedded server refuses it from its next start; for a cluster, run toolctl nats-config again and reload its nodes\n", pub)
	return ExitOK
}

// cmdNATSConfig writes what a NATS cluster and its toolgate services need:
// auth.conf (operator mode, no secret) and the worker, approver and admin
// .creds files.
func cmdNATSConfig(_ context.Context, env *Env, args []string) int {
	fs := flag.NewFlagSet("nats-config", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	dir := fs.String("out", "", "directory to write auth.conf, worker.creds, approver.creds and admin.creds to (default <state dir>/nats)")
	d := identity.DefaultJetStreamLimits
	var lim identity.JetStreamLimits
	fs.Int64Var(&lim.DiskStorage, "js-disk", d.DiskStorage, "the toolgate account's JetStream file storage, bytes over all streams (-1: unlimited)")
	fs.Int64Var(&lim.MemoryStorage, "js-memory", d.MemoryStorage, "the toolgate account's JetStream memory storage, bytes (-1: unlimited)")
	fs.Int64Var(&lim.Streams, "js-streams", d.Streams, "the toolgate account's streams, buckets included (-1: unlimited)")
	fs.Int64Var(&lim.Consumers, "js-consumers", d.Consumers, "the toolgate account's consumers, watchers included (-1: unlimited)")
	fs.Int64Var(&lim.MaxAckPending, "js-ack-pending", d.MaxAckPending, "unacknowledged messages per consumer (-1: unlimited)")
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(env.Stderr, "usage: toolctl nats-config [--out DIR]")
		return ExitUsage
	}
	in, err := identity.LoadInstall()
	if err != nil {
		return env.fail(ExitFailed, "%v", err)
	}
	if err := in.SetLimits(lim); err != nil {
		return env.fail(ExitFailed, "%v", err)
	}
	if *dir == "" {
		*dir = filepath.Join(filepath.Dir(in.Dir), "nats")
	}
	if err := secretDir(*dir); err != nil {
		return env.fail(ExitFailed, "%v", err)
	}
	conf := filepath.Join(*dir, "auth.conf")
	text, err := in.ServerConfig()
	if err != nil {
		return env.fail(ExitFailed, "%v", err)
	}
	// auth.conf holds only public keys and JWTs: nats-server, perhaps
	// another user, reads it.
	if err := identity.WriteFile(conf, []byte(text), 0o644); err != nil {
		return env.fail(ExitFailed, "%v", err)
	}
	for _, r := range []identity.Role{identity.RoleWorker, identity.RoleApprover, identity.RoleAdmin} {
		b, err := in.Mint(r, string(r))
		if err != nil {
			return env.fail(ExitFailed, "%v", err)
		}
		if err := writeSecret(filepath.Join(*dir, string(r)+".creds"), b); err != nil {
			return env.fail(ExitFailed, "%v", err)
		}
	}
	fmt.Fprintf(env.Stdout, "wrote %s (include it from every nats-server node) and worker.creds, approver.creds, admin.creds (secrets, mode 0600)\n", conf)
	fmt.Fprintf(env.Stdout, "two accounts: toolgate %s (these services, JetStream: %s) and agents %s\n",
		in.AccountPublicKey, limitsText(in.EffectiveLimits()), in.AgentsPublicKey)
	fmt.Fprintf(env.Stdout, "keys stay in %s; mint agents with `toolctl creds agent NAME` (credentials minted before agents had their own account are refused: mint them again)\n", in.Dir)
	return ExitOK
}

// limitsText says l in a line.
func limitsText(l identity.JetStreamLimits) string {
	n := func(v int64) string {
		if v < 0 {
			return "unlimited"
		}
		return strconv.FormatInt(v, 10)
	}
	return fmt.Sprintf("disk %s B, memory %s B, %s streams, %s consumers, %s pending acks per consumer",
		n(l.DiskStorage), n(l.MemoryStorage), n(l.Streams), n(l.Consumers), n(l.MaxAckPending))
}

// writeSecret writes b to path with mode 0600: a new file renamed over
// path, so an existing file of a wider mode (or a link to one) is replaced,
// not written through, and no reader sees it half written.
func writeSecret(path string, b []byte) error { return identity.WriteFile(path, b, 0o600) }
