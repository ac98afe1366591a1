package identity

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// revokedFile lists revoked users under the keys directory: one
// `<user public key> <unix time>` per line.
const revokedFile = "revoked"

// Revoke makes every user JWT of the user public key issued up to now
// invalid. The revocation is written into the account JWT: the embedded
// server applies it at its next start, a cluster once it loads the
// auth.conf `toolctl nats-config` writes afterwards.
func (in *Install) Revoke(userPublicKey string) error {
	if !nkeys.IsValidPublicUserKey(userPublicKey) {
		return fmt.Errorf("%w: %q is not a user public key (U...)", ErrBadCreds, userPublicKey)
	}
	lock, err := lockDir(in.Dir)
	if err != nil {
		return err
	}
	defer lock.Close()
	f, err := os.OpenFile(filepath.Join(in.Dir, revokedFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("revoke: %w", err)
	}
	if _, err := fmt.Fprintf(f, "%s %d\n", userPublicKey, time.Now().Unix()); err != nil {
		f.Close()
		return fmt.Errorf("revoke: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("revoke: %w", err)
	}
	return in.reissue()
}

// revocations reads the revoked users of dir.
func revocations(dir string) (jwt.RevocationList, error) {
	out := jwt.RevocationList{}
	f, err := os.Open(filepath.Join(dir, revokedFile))
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("revocations: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		at, err := strconv.ParseInt(fields[len(fields)-1], 10, 64)
		if len(fields) != 2 || err != nil || !nkeys.IsValidPublicUserKey(fields[0]) {
			return nil, fmt.Errorf("revocations %s:%d: want `<user public key> <unix time>`", f.Name(), n)
		}
		if at > out[fields[0]] {
			out[fields[0]] = at
		}
	}
	return out, sc.Err()
}

// lockDir takes the exclusive lock of a keys directory.
func lockDir(dir string) (*os.File, error) {
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("keys directory: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		return nil, fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	return lock, nil // closing releases the lock
}
