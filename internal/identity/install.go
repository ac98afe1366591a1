package identity

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// Names of the install's operator and accounts.
const (
	OperatorName      = "toolgate"
	SystemAccountName = "SYS"
	AccountName       = "toolgate"
)

// Install is the key material of one toolgate installation: the operator,
// the system account and the toolgate account every identity belongs to.
// The JWTs are issued afresh from the keys each time it is loaded.
type Install struct {
	// Dir is the directory the keys live in (<state dir>/keys).
	Dir string
	// Operator signs the accounts.
	Operator nkeys.KeyPair
	// System is the NATS system account.
	System nkeys.KeyPair
	// Account is the toolgate account; it issues every user JWT.
	Account nkeys.KeyPair

	// OperatorJWT, SystemJWT and AccountJWT are what a server trusts and
	// preloads (operator, system_account, resolver_preload).
	OperatorJWT, SystemJWT, AccountJWT string
	// OperatorPublicKey, SystemPublicKey and AccountPublicKey are the
	// public keys of the three.
	OperatorPublicKey, SystemPublicKey, AccountPublicKey string
}

// keyFiles are the seed files under the keys directory.
var keyFiles = []struct {
	name   string
	create func() (nkeys.KeyPair, error)
}{
	{"operator.nk", nkeys.CreateOperator},
	{"system.nk", nkeys.CreateAccount},
	{"toolgate.nk", nkeys.CreateAccount},
}

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
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("keys directory: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return nil, fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing releases it too

	in := &Install{Dir: dir}
	kps := make([]nkeys.KeyPair, len(keyFiles))
	for i, kf := range keyFiles {
		kp, err := loadOrCreateSeed(filepath.Join(dir, kf.name), kf.create)
		if err != nil {
			return nil, err
		}
		kps[i] = kp
	}
	in.Operator, in.System, in.Account = kps[0], kps[1], kps[2]
	if err := in.issue(); err != nil {
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
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(seed, '\n'), 0o600); err != nil {
		return nil, fmt.Errorf("write key %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("write key %s: %w", path, err)
	}
	return kp, nil
}

// issue signs the operator and account JWTs from the keys.
func (in *Install) issue() error {
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
	oc := jwt.NewOperatorClaims(in.OperatorPublicKey)
	oc.Name = OperatorName
	oc.SystemAccount = in.SystemPublicKey
	if in.OperatorJWT, err = oc.Encode(in.Operator); err != nil {
		return fmt.Errorf("operator JWT: %w", err)
	}
	sc := jwt.NewAccountClaims(in.SystemPublicKey)
	sc.Name = SystemAccountName
	if in.SystemJWT, err = sc.Encode(in.Operator); err != nil {
		return fmt.Errorf("system account JWT: %w", err)
	}
	ac := jwt.NewAccountClaims(in.AccountPublicKey)
	ac.Name = AccountName
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1, MaxAckPending: -1}
	if in.AccountJWT, err = ac.Encode(in.Operator); err != nil {
		return fmt.Errorf("account JWT: %w", err)
	}
	return nil
}

// ServerConfig is the nats-server configuration include that makes a
// server trust this install: operator mode, the system account, and a
// memory resolver with both accounts preloaded. Every node of a cluster
// loads the same text. It holds no secret.
func (in *Install) ServerConfig() string {
	return fmt.Sprintf(`# toolgate authentication: decentralized JWT (operator mode).
# Generated by `+"`toolctl nats-config`"+`; include it from every node's configuration.
# It holds public keys and signed JWTs only, no secret. Users (workers,
# approvers, admins, agents) are issued by the toolgate account key kept in
# the state directory of whoever generated it, so adding an agent
# (`+"`toolctl creds agent NAME`"+`) needs no change here.

operator: %s
system_account: %s

resolver: MEMORY
resolver_preload: {
  # %s
  %s: %s
  # %s
  %s: %s
}
`, in.OperatorJWT, in.SystemPublicKey,
		SystemAccountName, in.SystemPublicKey, in.SystemJWT,
		AccountName, in.AccountPublicKey, in.AccountJWT)
}
