// Command arbiter is the Arbiter policy decision service and its tools:
// serve, decide, apply, test, push, status, webhook, export.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/spf13/cobra"
)

// Exit codes.
const (
	exitOK     = 0
	exitDenied = 1 // a Deny policy failed, a test failed
	exitLoad   = 2 // input that cannot be loaded, bad usage, unreachable server
)

// exitError carries an exit code and an optional message.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func exitWith(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

func main() {
	// ARBITER_CPUPROFILE=FILE writes a CPU profile of the whole run (see
	// docs/performance.md).
	if path := os.Getenv("ARBITER_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "error: ARBITER_CPUPROFILE:", err)
			os.Exit(exitLoad)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "error: ARBITER_CPUPROFILE:", err)
			os.Exit(exitLoad)
		}
		code := run(os.Args[1:])
		pprof.StopCPUProfile()
		f.Close()
		os.Exit(code)
	}
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	root := newRootCommand()
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(os.Stderr, "error:", ee.msg)
		}
		return ee.code
	}
	fmt.Fprintln(os.Stderr, "error:", err)
	return exitLoad
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "arbiter",
		Short:         "Arbiter: a versioned policy decision service for Kubernetes CEL policies",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newServeCommand(),
		newDecideCommand(),
		newApplyCommand(),
		newTestCommand(),
		newPushCommand(),
		newStatusCommand(),
		newExportCommand(),
		newExplainCommand(),
		newGetCommand(),
		newWebhookCommand(),
		newBackupCommand(),
		newRestoreCommand(),
	)
	addConnFlags(root)
	return root
}
