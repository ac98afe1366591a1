package embedded

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrStoreInUse: another embedded server runs on the JetStream store.
// Two servers on one store would form two buses over the same files and
// corrupt them.
var ErrStoreInUse = errors.New("the JetStream store is in use")

// lockName is the store's lock file, in the data directory beside the
// store: it holds the running server's pid and client URL.
const lockName = "embedded.lock"

// Owner is the embedded server that holds a store.
type Owner struct {
	// PID is its process.
	PID int
	// URL is where its clients connect.
	URL string
}

// storeLock is a held lock of a data directory.
type storeLock struct{ f *os.File }

// lockStore takes the exclusive lock of dataDir's store, or returns
// ErrStoreInUse naming the server that holds it.
func lockStore(dataDir string) (*storeLock, error) {
	path := filepath.Join(dataDir, lockName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("--data %q: %w", dataDir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		who := "another embedded server"
		join := ""
		if o, ok := readOwner(path); ok {
			who = fmt.Sprintf("the embedded server of pid %d at %s", o.PID, o.URL)
			join = fmt.Sprintf("; join it as another worker with `worker --nats %s` (same user: no credentials needed), or", o.URL)
		}
		return nil, fmt.Errorf("%w by %s (%s)%s give this server a store of its own with --data DIR",
			ErrStoreInUse, who, path, join)
	}
	return &storeLock{f: f}, nil
}

// record writes who holds the lock, for a second server to name.
func (l *storeLock) record(url string) error {
	if err := l.f.Truncate(0); err != nil {
		return err
	}
	_, err := l.f.WriteAt([]byte(fmt.Sprintf("pid %d\nurl %s\n", os.Getpid(), url)), 0)
	return err
}

// release empties the record and drops the lock.
func (l *storeLock) release() {
	_ = l.f.Truncate(0)
	_ = l.f.Close() // closing releases the flock
}

// Running reports the embedded server that holds dataDir's store, if one
// runs (its lock is held). An empty dataDir is the state directory.
func Running(dataDir string) (Owner, bool) {
	if dataDir == "" {
		d, err := defaultDataDir()
		if err != nil {
			return Owner{}, false
		}
		dataDir = d
	}
	path := filepath.Join(dataDir, lockName)
	f, err := os.Open(path)
	if err != nil {
		return Owner{}, false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err == nil {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return Owner{}, false // nobody holds it
	}
	return readOwner(path)
}

// readOwner reads the record of a lock file.
func readOwner(path string) (Owner, bool) {
	f, err := os.Open(path)
	if err != nil {
		return Owner{}, false
	}
	defer f.Close()
	var o Owner
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		switch k {
		case "pid":
			o.PID, _ = strconv.Atoi(v)
		case "url":
			o.URL = v
		}
	}
	return o, o.PID > 0 && o.URL != ""
}
