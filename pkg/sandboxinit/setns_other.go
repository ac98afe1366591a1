//go:build linux && !amd64 && !arm64 && !riscv64 && !loong64

package sandboxinit

// sysSetns is unknown here: a template fails its probe (ENOSYS) and the
// worker keeps one sandbox per call.
var sysSetns = -1
