//go:build linux && (arm64 || riscv64 || loong64)

package sandboxinit

// sysSetns is setns(2)'s number in the generic table.
const sysSetns = 268
