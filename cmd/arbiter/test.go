package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/arbiter-pdp/arbiter/internal/textout"
	"github.com/arbiter-pdp/arbiter/kyvernotest"
)

type testOptions struct {
	fileName    string
	selector    string
	output      string
	detailed    bool
	failOnly    bool
	requireTest bool
	removeColor bool
	images      imageVerifierFlags
}

func newTestCommand() *cobra.Command {
	var o testOptions
	cmd := &cobra.Command{
		Use:   "test PATH...",
		Short: "Run Kyverno-format test suites (kyverno-test.yaml) found under the paths",
		Long: `Run Kyverno CLI test suites, unchanged, with the semantics of "kyverno test".

Every folder under PATH is searched recursively (hidden folders such as
.kyverno-test included) for kyverno-test.yaml files (cli.kyverno.io/v1alpha1
Test); a PATH that is a file is taken as a test file. Each test's policies,
resources, exceptions, values/variables, userinfo, context, clusterResources,
apiCallResponses, globalContextEntries and JSON payloads are read relative to
the test file, every resource is evaluated against every policy, and each
expected result is checked as Kyverno checks it: the policy by its last "/"
segment, resources by name or namespace/name (every resource when none of
the names exist), the rule ignored for ValidatingPolicy, a policy whose
selectors exclude a resource counting as a pass ("Excluded"), a missing
response as a failure ("Not found"). Each object a GeneratingPolicy generates
is a row of its own, compared with generatedResource(s).

For each test a table (ID, POLICY, RULE, RESOURCE, RESULT, REASON) and a
"Test Summary" line are printed; the closing line is "N passed, M failed",
counting result rows over all tests.

Exit status: 0 when every result passes, 1 when one fails, 2 when a test
cannot be loaded (the message names the file, the test and the field).`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTest(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args, &o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.fileName, "file-name", "f", kyvernotest.DefaultFileName, "name of the test files to look for")
	f.StringVarP(&o.selector, "test-case-selector", "t", "", `filter the expected results: "policy=NAME,rule=NAME,resource=NAME" (* and ? wildcards)`)
	f.StringVarP(&o.output, "output", "o", "table", "output: table or json")
	f.BoolVarP(&o.detailed, "detailed-results", "v", false, "show the message of each result")
	f.BoolVar(&o.failOnly, "fail-only", false, "show failing results only")
	f.BoolVar(&o.requireTest, "require-tests", false, "fail (exit 2) when no test file is found")
	f.BoolVar(&o.removeColor, "remove-color", false, "accepted for compatibility with kyverno test (output is never colored)")
	o.images.add(f)
	return cmd
}

func runTest(ctx context.Context, out, errOut io.Writer, args []string, o *testOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if len(args) == 0 {
		return exitWith(exitLoad, "no paths given (see arbiter test -h)")
	}
	switch o.output {
	case "table", "json":
	default:
		return exitWith(exitLoad, "-o: unknown output %q (table, json)", o.output)
	}
	filter, err := kyvernotest.ParseFilter(o.selector)
	if err != nil {
		return exitWith(exitLoad, "--test-case-selector: %v", err)
	}
	render := kyvernotest.RenderOptions{Detailed: o.detailed, FailOnly: o.failOnly}
	// The text renderers return no error: text keeps the first, checked
	// once the output is written.
	text := textout.New(out)
	emit := func(r *kyvernotest.SuiteResult) {
		if o.output != "table" {
			return
		}
		if err := r.Err(); err != nil {
			// Best-effort, on stderr: the exit status says a test could
			// not be loaded.
			_, _ = fmt.Fprintf(errOut, "error: cannot load test: %v\n", err)
			return
		}
		kyvernotest.RenderText(text, r, render)
	}
	runOpts := kyvernotest.Options{FileName: o.fileName, Filter: filter}
	if v, err := o.images.verifier(); err != nil {
		return err
	} else if v != nil {
		runOpts.ImageVerifier = v
	}
	results, err := kyvernotest.RunPaths(ctx, args, runOpts, emit)
	if err != nil {
		return exitWith(exitLoad, "%v", err)
	}
	sum := kyvernotest.Summarize(results)
	if o.output == "json" {
		if err := kyvernotest.RenderJSON(out, results); err != nil {
			return exitWith(exitLoad, "%v", err)
		}
	} else {
		if len(results) == 0 {
			text.Printf("No test files (%s) found\n", o.fileName)
		}
		kyvernotest.RenderSummary(text, sum)
		if err := text.Err(); err != nil {
			return err
		}
	}
	switch {
	case len(results) == 0 && o.requireTest:
		return exitWith(exitLoad, "no test files (%s) found under %v", o.fileName, args)
	case sum.LoadErrors > 0:
		return exitWith(exitLoad, "%d test(s) could not be loaded", sum.LoadErrors)
	case sum.Failed > 0:
		return exitWith(exitDenied, "")
	}
	return nil
}
