package identity

import (
	"os"
	"path/filepath"
)

// WriteFile writes b to path with mode, whatever the umask: a new file in
// path's directory renamed over path, so that an existing file of a wider
// mode (or a link to one) is replaced, not written through, and no reader
// sees it half written. Secrets (credentials, tokens) are written with
// mode 0600. The file is not synced to disk: what it holds can be made
// again (credentials are minted anew).
func WriteFile(path string, b []byte, mode os.FileMode) error { return writeFile(path, b, mode, false) }

// writeFile is WriteFile; with durable, the file and the rename are on
// disk when it returns (what cannot be made again: the install's keys).
func writeFile(path string, b []byte, mode os.FileMode, durable bool) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if durable {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil || !durable {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
