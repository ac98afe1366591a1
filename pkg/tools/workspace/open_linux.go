package workspace

import (
	"errors"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// noOpenat2 is set once openat2 proved unavailable (a kernel before 5.6,
// or a seccomp filter refusing it): every open then takes the slow path.
var noOpenat2 atomic.Bool

// openDirFD opens the root directory itself, for openat2 to start from.
func openDirFD(real string) *os.File {
	fd, err := unix.Open(real, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), real)
}

// openFast opens rel (clean and local) beneath r for reading in one
// openat2 call that refuses any symlink, magic link or mount crossing on
// the way. When it succeeds the file opened is r's directory entry rel
// itself, so its real path is r.real joined with rel, known without
// reading it back from /proc. ok is false when it cannot answer (a symlink
// or a mount on the way, a missing file, an old kernel): the caller then
// takes the slow path, whose answer and errors are the authority.
func openFast(r *root, rel string, flags int) (f *os.File, real string, ok bool) {
	if r.dirfd == nil || noOpenat2.Load() {
		return nil, "", false
	}
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV}
	fd, err := unix.Openat2(int(r.dirfd.Fd()), rel, &how)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
			noOpenat2.Store(true)
		}
		return nil, "", false
	}
	switch {
	case rel == ".":
		real = r.real
	case r.real == "/":
		real = "/" + rel
	default:
		real = r.real + "/" + rel
	}
	return os.NewFile(uintptr(fd), real), real, true
}
