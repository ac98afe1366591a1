package trust

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nkeys"
)

// EnvStateDir, when set, names the state directory instead of the XDG one.
const EnvStateDir = "TOOLGATE_STATE_DIR"

// AccountSeedFile is where, under the state directory, the install keeps
// the seed of its toolgate account: the account whose workers sign the
// results its agents read.
const AccountSeedFile = "keys/toolgate.nk"

// StatePath is the calling OS user's state directory: $TOOLGATE_STATE_DIR,
// else $XDG_STATE_HOME/toolgate, else ~/.local/state/toolgate. It holds
// the install's keys, credentials, the approver's state and, by default,
// the embedded server's store.
func StatePath() (string, error) {
	dir := os.Getenv(EnvStateDir)
	if dir == "" {
		if x := os.Getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
			dir = filepath.Join(x, "toolgate")
		} else {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("state directory: %w (set XDG_STATE_HOME)", err)
			}
			dir = filepath.Join(home, ".local", "state", "toolgate")
		}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	return dir, nil
}

// LocalAccount is the public key of the toolgate account of the install in
// the calling user's state directory, when toolgate ran here.
func LocalAccount() (string, error) {
	dir, err := StatePath()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(AccountSeedFile)))
	if err != nil {
		return "", fmt.Errorf("the local install's account: %w", err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		return "", fmt.Errorf("the local install's account %s: %w", AccountSeedFile, err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicAccountKey(pub) {
		return "", fmt.Errorf("the local install's account %s: not an account seed", AccountSeedFile)
	}
	return pub, nil
}
