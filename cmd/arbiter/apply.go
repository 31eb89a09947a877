package main

import (
	"context"
	"errors"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/arbiter-pdp/arbiter/apply"
	"github.com/arbiter-pdp/arbiter/internal/gctune"
)

func newApplyCommand() *cobra.Command {
	var o apply.Options
	var iv imageVerifierFlags
	cmd := &cobra.Command{
		Use:   "apply PATH... [--resource PATH]... [--exception PATH]... [--server ADDR [--candidate PATH]...]",
		Short: "Evaluate every resource under the paths against every policy under them",
		Long: `Evaluate every resource against every policy.

PATH is a file or a folder of YAML or JSON manifests (multi-document files and
v1 List objects are fine; "-" reads stdin, so "helm template ... | arbiter apply -"
works). Objects are sorted by kind: ValidatingPolicy, NamespacedValidatingPolicy
and PolicyException are policy objects, Namespace objects give namespaceObject
and namespace labels, and every other object is a resource to evaluate.

Locally, without --mode every policy is applied to every resource, as
"kyverno apply" does; --mode admission or background applies the policies'
evaluation gates.

GeneratingPolicies and NamespacedGeneratingPolicies are evaluated locally
only: their results follow each resource's, the table names the objects they
would generate, and -o yaml or json gives those objects before the resource's
report; nothing is created.

With --server ADDR the resources are decided by the Arbiter server (its
policies; the inputs may then hold only resources and Namespaces), all in one
stream pinned to one revision (admission mode unless --mode background).
--candidate PATH adds policy objects that are not committed: every resource is
decided with and without them, and the difference is printed ("would now deny
3 manifests").

What policies read with resource.Get, resource.List and globalContext.Get
comes locally from --context FILE (repeatable): plain manifests of the objects
(ConfigMaps, Deployments, CRDs, ...; every object under PATH is a resource to
evaluate, never context), GlobalContextEntries (also taken from PATH), and
Kyverno CLI context files (cli.kyverno.io/v1alpha1 Context: spec.resources and
spec.images); or, read-only, from a live API server with --cluster
[--kubeconfig FILE]. With --server the server's stored context objects are
read.

Output: a table, PolicyReports (-o json | yaml, one per resource), or JUnit XML
(-o junit) for CI systems. -o json is written as the reports are made (a run
of 10,000 manifests needs no memory for all of them): when a run fails after it
has begun (exit status 2), that output is cut short.

Exit status: 0, or 1 when a request would be denied (a Deny policy fails) —
with --fail-on fail, when any result is fail or error; with --fail-on warn, when
any is fail, error or warn; with --candidate, when the candidates would deny a
manifest allowed now. 2 when an input cannot be loaded (the message names the
file, the object and the field) or the server cannot be reached.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Paths = args
			v, err := iv.verifier()
			if err != nil {
				return err
			}
			if v != nil {
				o.ImageVerifier = v
			}
			return runApply(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.Resources, "resource", nil, "file or folder of resources to evaluate (repeatable)")
	f.StringArrayVar(&o.Exceptions, "exception", nil, "file or folder of PolicyExceptions (repeatable)")
	f.StringArrayVar(&o.Candidates, "candidate", nil, "with --server: policy objects to try without committing them (repeatable)")
	f.StringVar(&o.Server, "server", "", "evaluate on the Arbiter server at ADDR instead of locally")
	f.StringVar(&o.Mode, "mode", "", "admission or background: apply the policies' evaluation gates")
	f.StringVar(&o.Operation, "operation", "CREATE", "admission operation: CREATE, UPDATE, DELETE")
	f.StringVarP(&o.Output, "output", "o", "table", "output: table, json, yaml (PolicyReports) or junit")
	f.StringVar(&o.FailOn, "fail-on", "", "exit 1 on any result of this severity: fail or warn (default: on a denial)")
	f.StringVar(&o.Progress, "progress", "auto", "progress on stderr: auto (a terminal and many resources), always or never")
	addContextFlags(f, &o.Context)
	iv.add(f)
	return cmd
}

func runApply(ctx context.Context, out io.Writer, o apply.Options) error {
	gctune.Apply()
	if ctx == nil {
		ctx = context.Background()
	}
	o.ClientOptions = connOptions(ctx)
	o.Stderr = os.Stderr
	err := apply.Run(ctx, out, o)
	if errors.Is(err, apply.ErrFailed) {
		return exitWith(exitDenied, "")
	}
	return err
}
