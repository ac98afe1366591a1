package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/embedded"
	"github.com/toolgate/toolgate/internal/identity"
	"github.com/toolgate/toolgate/pkg/events"
)

// embeddedSide is toolgate as a fresh install runs it (-embedded): the
// worker started without --nats, so it runs the embedded nats-server of
// its own (its own state directory and --data, a free port), and the
// load generator connects to that server as an agent does, with agent
// credentials minted from the worker's install (`toolctl creds agent`):
// its calls come from the agents account. The worker's CPU is then that
// of the worker and its server together; this process's is the load
// generator's alone (its own server idles meanwhile).
const embeddedSide = "embedded"

// baseSide is an embedded side running the -baseline worker binary.
const baseSide = "base"

// sideConn is an agent's connection to one side's server.
type sideConn struct {
	nc *nats.Conn
	js jetstream.JetStream
}

// startEmbedded starts embedded side name's worker, binary bin, and
// returns it, the URL its server listens on for agents, and an agent's
// credentials file.
func startEmbedded(bin, ws, dir, name string, conc int) (*proc, string, string) {
	// The install the worker loads from its state directory, made here
	// first as its first start would, so that this process can mint an
	// agent's credentials from it.
	in, err := identity.LoadOrCreate(filepath.Join(stateDir(dir, name), "keys"))
	must(err)
	p := startWorker(bin, "", ws, dir, name, conc)
	run, ok := embedded.Running(dataDir(dir, name))
	if !ok {
		panic("the embedded worker's store has no running server recorded")
	}
	b, err := in.Mint(identity.RoleAgent, agent)
	must(err)
	path := filepath.Join(dir, "agent-"+name+".creds")
	must(os.WriteFile(path, b, 0o600))
	return p, run.URL, path
}

// stateDir is worker name's state directory (keys, credentials).
func stateDir(dir, name string) string { return filepath.Join(dir, "state-"+name) }

// dataDir is worker name's --data directory.
func dataDir(dir, name string) string { return filepath.Join(dir, name) }

// workerEnviron is the environment of a worker: its own state
// directory, never the user's, none of the user's NATS server or
// credentials, and -worker-env.
func workerEnviron(dir, name string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NATS_URL=") && !strings.HasPrefix(kv, identity.EnvCreds+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, identity.EnvStateDir+"="+stateDir(dir, name))
	if workerEnv != "" {
		env = append(env, strings.Split(workerEnv, ",")...)
	}
	return env
}

// connectEmbedded connects the generator to embedded side's server as
// agent "bench" with credsFile.
func (g *generator) connectEmbedded(side, url, credsFile string) {
	nc, err := nats.Connect(url, nats.Name("bench-embedded-agent"), nats.UserCredentials(credsFile),
		nats.CustomInboxPrefix(identity.InboxPrefix(identity.RoleAgent, agent)))
	must(err)
	js, err := jetstream.New(nc)
	must(err)
	if g.own == nil {
		g.own = map[string]sideConn{}
	}
	g.own[side] = sideConn{nc, js}
	sub, err := nc.Subscribe(events.ResultsOf(agent), g.result)
	must(err)
	must(sub.SetPendingLimits(-1, -1))
	g.subs = append(g.subs, sub)
	must(nc.Flush())
}

// isToolgate reports whether side's calls are toolgate's (its worker
// answers pending first for a parked call).
func isToolgate(side string) bool {
	return side == "toolgate" || side == "agents" || side == embeddedSide || side == baseSide
}
