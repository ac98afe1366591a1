package toolctl

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/internal/identity"
)

// cmdCreds mints a user of the install in the state directory and prints
// its .creds file (or writes it, mode 0600, with --out).
func cmdCreds(_ context.Context, env *Env, args []string) int {
	fs := flag.NewFlagSet("creds", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	out := fs.String("out", "", "write the .creds file here (mode 0600) instead of printing it")
	expires := fs.Duration("expires", 0, "the credentials stop working after this long (default never)")
	fs.Usage = func() {
		fmt.Fprintln(env.Stderr, "usage: toolctl creds agent|approver|admin|worker|tool|hook NAME [--out FILE] [--expires DURATION]")
		fmt.Fprintln(env.Stderr, "       toolctl creds revoke FILE|USER_PUBLIC_KEY")
		fmt.Fprintln(env.Stderr, "  prints a NATS .creds file (a secret) issued by this install's account of the role (agents, or toolgate);")
		fmt.Fprintln(env.Stderr, "  an agent's lets it call tools as NAME only and read only its own results;")
		fmt.Fprintln(env.Stderr, "  a tool's lets a remote tool service serve the tool NAME and nothing else;")
		fmt.Fprintln(env.Stderr, "  a hook's lets a tool hook service answer on toolgate.hook.NAME and nothing else.")
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
	if len(pos) != 2 {
		fs.Usage()
		return ExitUsage
	}
	if pos[0] == "revoke" {
		return revoke(env, pos[1])
	}
	role, err := identity.ParseRole(pos[0])
	if err != nil {
		return env.fail(ExitUsage, "%v", err)
	}
	if err := identity.ValidName(pos[1]); err != nil {
		return env.fail(ExitUsage, "%v", err)
	}
	in, err := identity.LoadInstall()
	if err != nil {
		return env.fail(ExitFailed, "%v", err)
	}
	b, err := in.MintExpiring(role, pos[1], *expires)
	if err != nil {
		return env.fail(ExitFailed, "%v", err)
	}
	if *out == "" {
		_, _ = env.Stdout.Write(b)
		return ExitOK
	}
	if err := writeSecret(*out, b); err != nil {
		return env.fail(ExitFailed, "%v", err)
	}
	fmt.Fprintf(env.Stderr, "toolctl: wrote %s credentials for %q to %s\n", role, pos[1], *out)
	return ExitOK
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
	dir := fs.String("out", "", "directory to write auth.conf, worker.creds, approver.creds and admin.creds to")
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
	if *dir == "" || fs.NArg() > 0 {
		fmt.Fprintln(env.Stderr, "usage: toolctl nats-config --out DIR")
		return ExitUsage
	}
	in, err := identity.LoadInstall()
	if err != nil {
		return env.fail(ExitFailed, "%v", err)
	}
	if err := in.SetLimits(lim); err != nil {
		return env.fail(ExitFailed, "%v", err)
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return env.fail(ExitFailed, "%v", err)
	}
	conf := filepath.Join(*dir, "auth.conf")
	if err := os.WriteFile(conf, []byte(in.ServerConfig()), 0o644); err != nil {
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

// writeSecret writes b to path with mode 0600, also when path existed with
// a wider mode.
func writeSecret(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
