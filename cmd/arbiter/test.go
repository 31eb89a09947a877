package main

import "github.com/spf13/cobra"

// newTestCommand is a placeholder until the Kyverno suite runner lands.
func newTestCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "test PATH...",
		Short: "Run Kyverno-format test suites (kyverno-test.yaml)",
		RunE: func(*cobra.Command, []string) error {
			return exitWith(exitLoad, "arbiter test is not available in this build")
		},
	}
}
