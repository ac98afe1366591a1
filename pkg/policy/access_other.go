//go:build !linux

package policy

import (
	"io/fs"
	"os"
	"syscall"
	"time"
)

// dirStamp is what identifies the directory dir as it is now. Where the
// change time and inode are not read portably, the stamp is always
// recent, so no listing is kept: every scan reads the directory again
// (bash's kernel boundary, which the scan serves, is Linux's).
func dirStamp(dir string) (listing, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return listing{}, err
	}
	if !fi.IsDir() {
		return listing{}, &fs.PathError{Op: "list", Path: dir, Err: syscall.ENOTDIR}
	}
	now := time.Now().UnixNano()
	return listing{mtime: now, ctime: now}, nil
}
