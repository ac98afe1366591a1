package main

import (
	"os"
	"path/filepath"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/internal/embedded"
	"github.com/toolgate/toolgate/internal/identity"
)

// The bench's server trusts a fresh install, as the worker's embedded
// server does (operator mode, a memory resolver); every connection of
// both sides authenticates with a user JWT of the toolgate account:
//
//   - the worker: worker credentials minted as `toolctl creds worker`
//     does (the worker role's permissions);
//   - the load generator: the agent role's permissions for agent "bench",
//     plus the raw pattern's call and result subjects;
//   - the raw pattern's worker: the JetStream API, its consumer's acks,
//     its claims bucket and its results, and its own inbox.
type auth struct {
	in  *identity.Install
	dir string
}

func newAuth(dir string) *auth {
	in, err := identity.LoadOrCreate(filepath.Join(dir, "keys"))
	must(err)
	return &auth{in: in, dir: dir}
}

// trust makes opts trust the install.
func (a *auth) trust(opts *server.Options) { must(embedded.Trust(opts, a.in)) }

// worker writes credentials of worker name and returns the file.
func (a *auth) worker(name string) string {
	b, err := a.in.Mint(identity.RoleWorker, name)
	must(err)
	return a.write("worker-"+name, b)
}

// generator writes the load generator's credentials.
func (a *auth) generator() string {
	p := identity.Permissions(identity.RoleAgent, agent)
	p.Pub.Allow.Add("bench.call." + agent + ".>")
	p.Sub.Allow.Add("bench.result." + agent + ".>")
	p.Pub.Allow.Add(busCalls + agent + ".>")
	p.Sub.Allow.Add(busResult + agent + ".>")
	return a.user("bench-load", p)
}

// agent writes credentials of the benchmark's agent in the agents
// account, as an agent gets them.
func (a *auth) agent() string {
	b, err := a.in.Mint(identity.RoleAgent, agent)
	must(err)
	return a.write("agent-"+agent, b)
}

// rawInbox is the raw pattern worker's inbox prefix.
const rawInbox = "_INBOX.raw"

// raw writes the raw pattern's worker's credentials.
func (a *auth) raw() string {
	var p jwt.Permissions
	p.Pub.Allow = jwt.StringList{"$JS.API.>", "$JS.ACK.BENCH_CALLS.>", "$KV.bench_claims.>", "bench.result.>"}
	p.Sub.Allow = jwt.StringList{rawInbox + ".>"}
	return a.user("bench-raw", p)
}

// bus writes the bus side's worker's credentials.
func (a *auth) bus() string {
	var p jwt.Permissions
	p.Pub.Allow = jwt.StringList{"$JS.API.>", "$JS.ACK.BUS_CALLS.>", "$KV.bench_bus_claims.>", busResult + ">", busAudit + ">"}
	p.Sub.Allow = jwt.StringList{busInbox + ".>"}
	return a.user("bench-bus", p)
}

// user issues a user JWT with permissions p, signed by the account key.
func (a *auth) user(name string, p jwt.Permissions) string {
	ukp, err := nkeys.CreateUser()
	must(err)
	pub, err := ukp.PublicKey()
	must(err)
	uc := jwt.NewUserClaims(pub)
	uc.Name = name
	uc.Permissions = p
	enc, err := uc.Encode(a.in.Account)
	must(err)
	seed, err := ukp.Seed()
	must(err)
	b, err := jwt.FormatUserConfig(enc, seed)
	must(err)
	return a.write(name, b)
}

func (a *auth) write(name string, b []byte) string {
	path := filepath.Join(a.dir, name+".creds")
	must(os.WriteFile(path, b, 0o600))
	return path
}
