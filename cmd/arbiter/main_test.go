package main

import (
	"os"
	"testing"
)

// TestMain lets the test binary stand in for arbiter when a command
// re-executes itself (restore verifies backups in a child process).
func TestMain(m *testing.M) {
	if os.Getenv("ARBITER_RUN_MAIN") == "1" {
		os.Exit(run(os.Args[1:]))
	}
	os.Exit(m.Run())
}
