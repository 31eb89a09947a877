// Command arbiter is the Arbiter policy decision service and its tools:
// serve, decide, apply, test, push, status, webhook, export.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
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
	// ARBITER_CPUPROFILE=FILE writes a CPU profile of the whole run, and
	// ARBITER_MEMPROFILE=FILE a profile of its allocations (see
	// docs/performance.md).
	cpu, mem := os.Getenv("ARBITER_CPUPROFILE"), os.Getenv("ARBITER_MEMPROFILE")
	if cpu == "" && mem == "" {
		os.Exit(run(os.Args[1:]))
	}
	create := func(env, path string) *os.File {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "error: %s: %v\n", env, err)
			os.Exit(exitLoad)
		}
		return f
	}
	var cpuFile, memFile *os.File
	if cpu != "" {
		cpuFile = create("ARBITER_CPUPROFILE", cpu)
		if err := pprof.StartCPUProfile(cpuFile); err != nil {
			fmt.Fprintln(os.Stderr, "error: ARBITER_CPUPROFILE:", err)
			os.Exit(exitLoad)
		}
	}
	if mem != "" {
		runtime.MemProfileRate = 64 << 10
		memFile = create("ARBITER_MEMPROFILE", mem)
	}
	code := run(os.Args[1:])
	if cpuFile != nil {
		pprof.StopCPUProfile()
		if err := cpuFile.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "error: ARBITER_CPUPROFILE:", err)
		}
	}
	if memFile != nil {
		if err := pprof.Lookup("allocs").WriteTo(memFile, 0); err != nil {
			fmt.Fprintln(os.Stderr, "error: ARBITER_MEMPROFILE:", err)
		}
		if err := memFile.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "error: ARBITER_MEMPROFILE:", err)
		}
	}
	os.Exit(code)
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
