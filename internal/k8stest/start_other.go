//go:build !linux

package k8stest

import "os/exec"

// startDying starts cmd (without a parent-death signal outside Linux: stop
// the server with Stop).
func startDying(cmd *exec.Cmd) error { return cmd.Start() }
