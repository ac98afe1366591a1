package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/embedded"
	"github.com/toolgate/toolgate/internal/identity"
)

// workerIdentity is the name in the worker's user JWT; every worker of an
// install shares it.
const workerIdentity = "worker"

// connect starts the embedded server when no NATS URL is given and
// connects as the worker, refusing state the served workspace reaches.
// srv is nil when an outside server is used; creds is nil when the URL
// carries a password (then nothing on the bus is signed by this install).
func connect(o Options, ws string) (nc *nats.Conn, url string, creds *identity.Creds, srv *embedded.Server, err error) {
	state, err := identity.StatePath()
	if err != nil {
		return nil, "", nil, nil, err
	}
	if err := identity.CheckOutside("the state directory", state, ws); err != nil {
		return nil, "", nil, nil, err
	}
	announceOldState(o, ws, state)
	url = o.NATSURL
	credsFile := o.Creds
	if credsFile == "" {
		credsFile = os.Getenv(identity.EnvCreds)
	}
	if url == "" {
		if o.DataDir != "" {
			if err := identity.CheckOutside("--data", o.DataDir, ws); err != nil {
				return nil, "", nil, nil, err
			}
		}
		in, err := identity.LoadInstall()
		if err != nil {
			return nil, "", nil, nil, err
		}
		if creds, err = in.MintCreds(identity.RoleWorker, workerIdentity); err != nil {
			return nil, "", nil, nil, err
		}
		if run, ok := embedded.Running(o.DataDir); ok && (o.Listen == "" || o.Listen == strings.TrimPrefix(run.URL, "nats://")) {
			// The store is served already: one bus per store, so this
			// worker joins that server as another worker.
			url = run.URL
			fmt.Fprintf(o.Out, "toolgate: the embedded NATS of pid %d serves this store at %s: joining it as another worker (--listen ADDR --data DIR starts a server of its own)\n", run.PID, url)
		} else {
			srv, err = embedded.Start(embedded.Config{Listen: o.Listen, DataDir: o.DataDir, Install: in, Logger: o.Logger})
			if err != nil {
				return nil, "", nil, nil, err
			}
			url = srv.ClientURL()
			fmt.Fprintf(o.Out, "toolgate: embedded NATS with JetStream listening on %s (authenticated: services in account %s, agents in account %s)\n", url, in.AccountPublicKey, in.AgentsPublicKey)
			fmt.Fprintf(o.Out, "toolgate: data in %s; keys and credentials in %s\n", srv.StoreDir(), in.Dir)
		}
	} else {
		fmt.Fprintf(o.Out, "toolgate: using NATS at %s\n", identity.RedactURL(url))
		if !identity.HasUserInfo(url) || credsFile != "" {
			if creds, err = identity.Resolve(credsFile, identity.RoleWorker, workerIdentity); err != nil {
				return nil, "", nil, nil, err
			}
		}
	}
	opts := []nats.Option{nats.Name("toolgate-worker"), nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond), nats.RetryOnFailedConnect(false)}
	if creds != nil {
		opts = append(opts, creds.NATSOptions()...)
		fmt.Fprintf(o.Out, "toolgate: connecting as %s\n", creds)
	} else {
		opts = append(opts, nats.CustomInboxPrefix(identity.InboxPrefix(identity.RoleWorker, workerIdentity)))
	}
	nc, err = nats.Connect(url, opts...)
	if err != nil {
		if srv != nil {
			srv.Close()
		}
		err = fmt.Errorf("connect to NATS at %s: %w", identity.RedactURL(url), err)
		if errors.Is(err, nats.ErrAuthorization) && creds != nil {
			err = fmt.Errorf("%w\n%s", err, identity.AuthHint(credsFile))
		}
		return nil, "", nil, nil, err
	}
	return nc, url, creds, srv, nil
}

// announceOldState says where state lives now when an old ./.toolgate
// directory is found; it is left alone.
func announceOldState(o Options, ws, state string) {
	seen := map[string]bool{}
	for _, d := range []string{".", ws} {
		old, err := filepath.Abs(filepath.Join(d, ".toolgate"))
		if err != nil || seen[old] {
			continue
		}
		seen[old] = true
		if fi, err := os.Stat(old); err == nil && fi.IsDir() {
			fmt.Fprintf(o.Out, "toolgate: %s is no longer used and was left alone: state (keys, credentials, approver, JetStream store) lives in %s; remove it when you no longer need it\n", old, state)
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			continue
		}
	}
}

// trustedFiles names the files the worker trusts or keeps secret, by the
// flag that gives each: the gate's policy, the hooks that change calls
// and outputs, the tool overrides, the MCP servers it starts, and the
// credentials it connects with. An agent that could write one could
// change what judges it; one that could read a credentials file could
// act as the worker.
func trustedFiles(o Options) map[string]string {
	creds := o.Creds
	if creds == "" {
		creds = os.Getenv(identity.EnvCreds)
	}
	return map[string]string{"--policy": o.PolicyFile, "--hooks": o.HooksFile, "--tools-config": o.ToolsConfig,
		"--mcp-config": o.MCPConfig, "--creds": creds, "--mcp-creds": o.MCPCreds}
}

// trustedOutside refuses a trusted file (trustedFiles) inside a served
// root, or reached through a symbolic link inside one.
func trustedOutside(o Options, roots ...string) error {
	files := trustedFiles(o)
	for _, what := range []string{"--policy", "--hooks", "--tools-config", "--mcp-config", "--creds", "--mcp-creds"} {
		p := files[what]
		if p == "" {
			continue
		}
		if err := identity.CheckOutside(what, p, roots...); err != nil {
			return err
		}
	}
	return nil
}

// stateOutside refuses a state directory, data directory or trusted
// file inside the extra roots the policy opens to the tools. Roots are
// opened at start only: a policy reloaded later that names another one
// opens nothing until the next start, which checks again.
func stateOutside(o Options, roots []string) error {
	if len(roots) == 0 {
		return nil
	}
	state, err := identity.StateDir()
	if err != nil {
		return err
	}
	for what, p := range map[string]string{"the state directory": state, "--data": o.DataDir} {
		if p == "" {
			continue
		}
		if err := identity.CheckOutside(what, p, roots...); err != nil {
			return fmt.Errorf("policy allowed_paths: %w", err)
		}
	}
	if err := trustedOutside(o, roots...); err != nil {
		return fmt.Errorf("policy allowed_paths: %w", err)
	}
	return nil
}

// hiddenState lists the state directory (keys, credentials, the approver's
// state) and the data directory (the JetStream store) for the sandbox to
// cover with empty directories: a command runs as a user who may own them
// (an unprivileged worker's own user, or root in a container), and a
// Makefile or test the gate never reads could print the account seed.
// Only directories that exist are listed; none without a sandbox.
func hiddenState(o Options, sandboxed bool) []string {
	if !sandboxed {
		return nil
	}
	var out []string
	state, _ := identity.StatePath()
	for _, d := range []string{state, o.DataDir} {
		if d == "" {
			continue
		}
		d, err := filepath.Abs(d)
		if err != nil || d == "/" || slices.Contains(out, d) {
			continue
		}
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			out = append(out, d)
		}
	}
	return out
}
