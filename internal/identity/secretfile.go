package identity

import (
	"os"
	"path/filepath"
)

// WriteFile writes b to path with mode, whatever the umask: a new file in
// path's directory renamed over path, so that an existing file of a wider
// mode (or a link to one) is replaced, not written through, and no reader
// sees it half written. Secrets (credentials, tokens) are written with
// mode 0600.
func WriteFile(path string, b []byte, mode os.FileMode) error {
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
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
