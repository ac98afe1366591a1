package identity

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/pkg/trust"
)

// Names of the install's operator and accounts.
const (
	OperatorName      = "toolgate"
	SystemAccountName = "SYS"
	AccountName       = "toolgate"
)

// Install is the key material of one toolgate installation: the operator,
// the system account, the toolgate account its services belong to
// (workers, approvers, admins, tool and hook services, JetStream) and
// the agents account every agent belongs to. The two meet only through
// the toolgate account's exports (Crossings). The operator's and the
// accounts' JWTs are issued afresh from the keys by each load, when first
// asked for (JWTs): minting a user needs none of them.
type Install struct {
	// Dir is the directory the keys live in (<state dir>/keys).
	Dir string
	// Operator signs the accounts.
	Operator nkeys.KeyPair
	// System is the NATS system account.
	System nkeys.KeyPair
	// Account is the toolgate account; it issues the user JWTs of every
	// role but the agent.
	Account nkeys.KeyPair
	// Agents is the agents account; it issues the agents' user JWTs.
	Agents nkeys.KeyPair
	// Limits are the toolgate account's JetStream limits; zero fields
	// take DefaultJetStreamLimits' (set them with SetLimits).
	Limits JetStreamLimits

	// OperatorPublicKey, SystemPublicKey, AccountPublicKey and
	// AgentsPublicKey are the public keys of the four.
	OperatorPublicKey, SystemPublicKey, AccountPublicKey, AgentsPublicKey string

	mu     sync.Mutex
	issued *JWTs // nil until JWTs issues them
}

// JWTs are what a server trusts and preloads (operator, system_account,
// resolver_preload): the operator's and the three accounts' JWTs.
type JWTs struct {
	Operator, System, Account, Agents string
}

// JWTs returns the operator's and the accounts' JWTs, signed from the keys
// (with the revocations and the JetStream limits of the moment) the first
// time they are asked for, and again after SetLimits or Revoke.
func (in *Install) JWTs() (JWTs, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.issued == nil {
		j, err := in.issue()
		if err != nil {
			return JWTs{}, err
		}
		in.issued = &j
	}
	return *in.issued, nil
}

// reissue signs the JWTs again, after a change of what they carry.
func (in *Install) reissue() error {
	in.mu.Lock()
	in.issued = nil
	in.mu.Unlock()
	_, err := in.JWTs()
	return err
}

// keyFiles are the seed files under the keys directory.
var keyFiles = []struct {
	name   string
	create func() (nkeys.KeyPair, error)
}{
	{"operator.nk", nkeys.CreateOperator},
	{"system.nk", nkeys.CreateAccount},
	{path.Base(trust.AccountSeedFile), nkeys.CreateAccount},
	{"agents.nk", nkeys.CreateAccount},
}

// splitFile, under the keys directory, records when an install made
// before the agents account existed got it: every user JWT issued until
// then is revoked (an agent's then belonged to the toolgate account).
const splitFile = "accounts-split"

// LoadInstall loads the install of the calling user's state directory,
// creating its keys at first use.
func LoadInstall() (*Install, error) {
	dir, err := StateDir()
	if err != nil {
		return nil, err
	}
	return LoadOrCreate(filepath.Join(dir, "keys"))
}

// LoadOrCreate loads the install whose seeds are in dir, creating the
// missing ones (files 0600, dir 0700). An exclusive file lock on
// dir/.lock makes concurrent first starts agree on one set of keys.
func LoadOrCreate(dir string) (*Install, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("keys directory: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer lock.Close()

	in := &Install{Dir: dir}
	if err := markSplit(dir); err != nil {
		return nil, err
	}
	kps := make([]nkeys.KeyPair, len(keyFiles))
	for i, kf := range keyFiles {
		kp, err := loadOrCreateSeed(filepath.Join(dir, kf.name), kf.create)
		if err != nil {
			return nil, err
		}
		kps[i] = kp
	}
	in.Operator, in.System, in.Account, in.Agents = kps[0], kps[1], kps[2], kps[3]
	if err := in.publicKeys(); err != nil {
		return nil, err
	}
	return in, nil
}

func loadOrCreateSeed(path string, create func() (nkeys.KeyPair, error)) (nkeys.KeyPair, error) {
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		kp, err := nkeys.FromSeed(bytes.TrimSpace(b))
		if err != nil {
			return nil, fmt.Errorf("key %s: not an nkey seed", path) // never echo the content
		}
		return kp, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("key %s: %w", path, err)
	}
	kp, err := create()
	if err != nil {
		return nil, fmt.Errorf("create key %s: %w", path, err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, err
	}
	// On disk before it is used: a key lost to a crash after it signed
	// anything would orphan what it signed.
	if err := writeFile(path, append(seed, '\n'), 0o600, true); err != nil {
		return nil, fmt.Errorf("write key %s: %w", path, err)
	}
	return kp, nil
}

// publicKeys sets the public keys from the key pairs.
func (in *Install) publicKeys() error {
	var err error
	if in.OperatorPublicKey, err = in.Operator.PublicKey(); err != nil {
		return err
	}
	if in.SystemPublicKey, err = in.System.PublicKey(); err != nil {
		return err
	}
	if in.AccountPublicKey, err = in.Account.PublicKey(); err != nil {
		return err
	}
	if in.AgentsPublicKey, err = in.Agents.PublicKey(); err != nil {
		return err
	}
	return nil
}

// issue signs the operator and account JWTs from the keys.
func (in *Install) issue() (JWTs, error) {
	var j JWTs
	var err error
	oc := jwt.NewOperatorClaims(in.OperatorPublicKey)
	oc.Name = OperatorName
	oc.SystemAccount = in.SystemPublicKey
	if j.Operator, err = oc.Encode(in.Operator); err != nil {
		return JWTs{}, fmt.Errorf("operator JWT: %w", err)
	}
	sc := jwt.NewAccountClaims(in.SystemPublicKey)
	sc.Name = SystemAccountName
	if j.System, err = sc.Encode(in.Operator); err != nil {
		return JWTs{}, fmt.Errorf("system account JWT: %w", err)
	}
	revoked, err := revocations(in.Dir)
	if err != nil {
		return JWTs{}, err
	}
	split, err := splitTime(in.Dir)
	if err != nil {
		return JWTs{}, err
	}
	if split > 0 {
		revoked[jwt.All] = split
	}
	ac := jwt.NewAccountClaims(in.AccountPublicKey)
	ac.Name = AccountName
	ac.Limits.JetStreamLimits = in.Limits.withDefaults().jwt()
	ac.Exports = exports()
	// Agents have no JetStream of their own, and no way into the
	// toolgate account but its exports.
	gc := jwt.NewAccountClaims(in.AgentsPublicKey)
	gc.Name = AgentsAccountName
	gc.Imports = imports(in.AccountPublicKey)
	for _, c := range []*jwt.AccountClaims{ac, gc} {
		for pub, at := range revoked {
			c.RevokeAt(pub, time.Unix(at, 0))
		}
	}
	if j.Account, err = ac.Encode(in.Operator); err != nil {
		return JWTs{}, fmt.Errorf("account JWT: %w", err)
	}
	if j.Agents, err = gc.Encode(in.Operator); err != nil {
		return JWTs{}, fmt.Errorf("agents account JWT: %w", err)
	}
	return j, nil
}

// markSplit, in a keys directory that holds the toolgate account's key
// but not yet the agents account's (an install made before agents had
// their own account), records the time: every user JWT issued until then
// is revoked, the old agents' first, which the toolgate account issued
// with permissions of the old layout. Workers and the embedded server
// mint afresh; files written by `toolctl creds` or `toolctl nats-config`
// before must be written again.
func markSplit(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "agents.nk")); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "toolgate.nk")); err != nil {
		return nil // a fresh install: nothing was issued before
	}
	// One second back: what is minted from now on, in the same second,
	// stays valid (a revocation covers JWTs issued at or before it).
	at := time.Now().Unix() - 1
	if err := os.WriteFile(filepath.Join(dir, splitFile), fmt.Appendf(nil, "%d\n", at), 0o600); err != nil {
		return fmt.Errorf("keys directory: %w", err)
	}
	return nil
}

// splitTime is the time markSplit recorded in dir, or 0.
func splitTime(dir string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, splitFile))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("keys directory: %w", err)
	}
	at, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("keys directory: %s: want a unix time", filepath.Join(dir, splitFile))
	}
	return at, nil
}

// ServerConfig is the nats-server configuration include that makes a
// server trust this install: operator mode, the system account, and a
// memory resolver with the three accounts preloaded. Every node of a cluster
// loads the same text. It holds no secret.
func (in *Install) ServerConfig() (string, error) {
	j, err := in.JWTs()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf(`# toolgate authentication: decentralized JWT (operator mode).
# Generated by `+"`toolctl nats-config`"+`; include it from every node's configuration.
# It holds public keys and signed JWTs only, no secret. Two accounts:
# toolgate (workers, approvers, admins, tool and hook services, JetStream)
# and agents (every agent, no JetStream), joined only by the exports and
# imports written in their JWTs. Users are issued by the account keys kept
# in the state directory of whoever generated it, so adding an agent
# (`+"`toolctl creds agent NAME`"+`) needs no change here.

operator: %s
system_account: %s

resolver: MEMORY
resolver_preload: {
  # %s
  %s: %s
  # %s
  %s: %s
  # %s
  %s: %s
}
`, j.Operator, in.SystemPublicKey,
		SystemAccountName, in.SystemPublicKey, j.System,
		AccountName, in.AccountPublicKey, j.Account,
		AgentsAccountName, in.AgentsPublicKey, j.Agents), nil
}
