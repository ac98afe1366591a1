package toolctl

import "golang.org/x/sys/unix"

// ioctlGetTermios is the request that reads a terminal's settings: it
// fails on anything but a terminal.
const ioctlGetTermios = unix.TCGETS
