//go:build linux

package sandboxinit

// sysSetns is setns(2)'s number.
const sysSetns = 308
