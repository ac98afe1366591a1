package resultcache

import (
	"fmt"
	"io/fs"
	"syscall"
)

// statIdentity is what tells a file apart beyond its name, size and
// modification time: device, inode and change time.
func statIdentity(fi fs.FileInfo) string {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf(" %d %d %d.%d", st.Dev, st.Ino, st.Ctim.Sec, st.Ctim.Nsec)
	}
	return ""
}
