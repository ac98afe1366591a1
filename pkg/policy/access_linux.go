package policy

import (
	"io/fs"
	"syscall"
)

// dirStamp is what identifies the directory dir as it is now (device,
// inode, modification and change times), without its entries; an error
// when dir is not a directory.
func dirStamp(dir string) (listing, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil {
		return listing{}, &fs.PathError{Op: "lstat", Path: dir, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return listing{}, &fs.PathError{Op: "list", Path: dir, Err: syscall.ENOTDIR}
	}
	return listing{dev: uint64(st.Dev), ino: st.Ino, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}, nil
}
