//go:build unix

package convert

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time the process has used (every thread: the
// benchmark's and the garbage collector's), so that benchmarks can report
// the CPU per operation, which the load of other processes on the machine
// does not inflate as it does wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
