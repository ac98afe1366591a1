package main

import (
	"os"
	"runtime/debug"
)

// Garbage collector settings unless GOGC or GOMEMLIMIT say otherwise. A
// worker's live heap is small (a few MiB plus what its running calls
// hold), so Go's default (collect when the heap doubles) collects many
// times a second under load: about a tenth of the worker's CPU. Letting
// the heap grow to five times the live data saves most of that. The soft
// limit bounds that growth; it sits well above a worker's live heap (the
// embedded NATS server's caches share the process) so that the collector
// never runs back to back near it.
const (
	gcPercent   = 400
	memoryLimit = 256 << 20
)

func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
}
