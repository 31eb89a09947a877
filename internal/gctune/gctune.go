// Package gctune sets the garbage collector of Arbiter's long-running
// processes (serve, webhook) and of batch apply.
//
// A decision allocates tens of kilobytes that die at once, over a live heap
// of a few MiB (the compiled snapshot). With Go's default GOGC=100 the
// collector then runs every few hundred decisions, and on a 2-core machine
// its mark workers and assists take a fifth of the CPU and most of the
// latency tail. GOGC=400 trades heap for CPU: the heap peaks at ~5× the live
// heap instead of 2×, which is still a few tens of MiB. GOMEMLIMIT (set to
// the container's memory limit in deploy/) keeps the collector honest when
// memory is short, and an explicit GOGC in the environment wins over this.
package gctune

import (
	"os"
	"runtime/debug"
)

// Percent is the GOGC Arbiter's processes run with unless GOGC is set.
const Percent = 400

// Apply sets the collector's target percentage to Percent unless the GOGC
// environment variable says otherwise, and returns the percentage in effect.
func Apply() int {
	if v, ok := os.LookupEnv("GOGC"); ok && v != "" {
		// The runtime has applied it; read it back without changing it.
		p := debug.SetGCPercent(-1)
		debug.SetGCPercent(p)
		return p
	}
	debug.SetGCPercent(Percent)
	return Percent
}
