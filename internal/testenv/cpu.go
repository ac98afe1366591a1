package testenv

import (
	"syscall"
	"time"
)

// ProcessCPU is the CPU time (user and system) this process has used: a
// benchmark reports its difference per operation (cpu-µs/op).
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
