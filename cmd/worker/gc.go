package main

import (
	"os"
	"runtime/debug"
)

// Garbage collector settings unless GOGC or GOMEMLIMIT say otherwise. A
// worker's live heap is small (a few MiB plus what its running calls
// hold), so Go's default (collect when the heap doubles) collects many
// times a second under load: about a tenth of the worker's CPU. Letting
// the heap grow to five times the live data, within a soft limit that
// keeps the process near 100 MiB, saves most of that.
const (
	gcPercent   = 400
	memoryLimit = 80 << 20
)

func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
}
