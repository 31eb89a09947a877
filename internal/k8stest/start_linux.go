package k8stest

import (
	"os/exec"
	"runtime"
	"syscall"
)

// starter is a goroutine locked to its OS thread for the life of the
// process: the parent-death signal of a child fires when the thread that
// started it exits, so every child is started from this one thread.
var starter = func() chan func() {
	c := make(chan func())
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives as long as the process
		for f := range c {
			f()
		}
	}()
	return c
}()

// startDying starts cmd so that it is killed when the test binary dies.
func startDying(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	errc := make(chan error, 1)
	starter <- func() { errc <- cmd.Start() }
	return <-errc
}
