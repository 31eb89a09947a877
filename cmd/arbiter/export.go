package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/apply"
	"github.com/arbiter-pdp/arbiter/engine"
	exportpkg "github.com/arbiter-pdp/arbiter/engine/export"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/internal/textout"
)

func newExportCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Export policies to other formats",
	}
	cmd.AddCommand(newExportVAPCommand(), newExportMAPCommand())
	return cmd
}

// parseNow parses --now (RFC 3339), time.Now() when empty.
func parseNow(at string) (time.Time, error) {
	if at == "" {
		return time.Now(), nil
	}
	t, err := time.Parse(time.RFC3339, at)
	if err != nil {
		return time.Time{}, exitWith(exitLoad, "--now: %v", err)
	}
	return t, nil
}

func newExportMAPCommand() *cobra.Command {
	var at string
	cmd := &cobra.Command{
		Use:   "map PATH...",
		Short: "Print a MutatingAdmissionPolicy and binding for each MutatingPolicy that can be expressed as one",
		Long: `Print, as YAML, the Kubernetes MutatingAdmissionPolicy and binding of each
MutatingPolicy under the paths, named as Kyverno names those it generates:
mpol-NAME and mpol-NAME-binding (plus mpol-NAME-CONFIG for each pod-controller
autogen configuration). The whole matchConstraints is kept, with matchPolicy
Exact, so the generated policy matches what the MutatingPolicy matches. The
PolicyExceptions of a policy found under the paths are folded in: a full
exemption becomes a negated matchCondition, image and value exceptions the
variables allowedImages and allowedValues. Expired exceptions are left out.

A policy that cannot be expressed is refused, with the reason, on stderr: it is
a NamespacedMutatingPolicy, it mutates existing resources, it does not run at
admission, it has auditAnnotations, an exception of it defines compensating
controls, or it uses what the API server lacks (Kyverno's CEL libraries,
matchConditions that read variables).

Exit status: 0 when every policy was exported, 1 when one was refused, 2 when
an input cannot be loaded.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			now, err := parseNow(at)
			if err != nil {
				return err
			}
			return runExport(cmd.OutOrStdout(), cmd.ErrOrStderr(), args, now, (*engine.PolicySet).ExportMAP)
		},
	}
	cmd.Flags().StringVar(&at, "now", "", "the time exceptions' expiresAt is compared with (RFC 3339; default: now)")
	return cmd
}

func newExportVAPCommand() *cobra.Command {
	var at string
	cmd := &cobra.Command{
		Use:   "vap PATH...",
		Short: "Print a ValidatingAdmissionPolicy and binding for each ValidatingPolicy that can be expressed as one",
		Long: `Print, as YAML, the Kubernetes ValidatingAdmissionPolicy and binding of each
ValidatingPolicy under the paths, as Kyverno generates them: vpol-NAME and
vpol-NAME-binding (plus vpol-NAME-CONFIG for each pod-controller autogen
configuration). The PolicyExceptions of a policy found under the paths are
folded in: a full exemption becomes a negated matchCondition, image and value
exceptions the variables allowedImages and allowedValues (replacing
exceptions.allowedImages and exceptions.allowedValues). Expired exceptions are
left out.

A policy that cannot be expressed is refused, with the reason, on stderr: an
exception of it defines compensating controls (spec.validations), it uses a CEL
function or variable the API server lacks (Kyverno's libraries, exceptions
beyond the two lists, JSON mode), it cannot run at admission, or its
validationActions hold both Deny and Warn.

Exit status: 0 when every policy was exported, 1 when one was refused, 2 when
an input cannot be loaded.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			now, err := parseNow(at)
			if err != nil {
				return err
			}
			return runExport(cmd.OutOrStdout(), cmd.ErrOrStderr(), args, now, (*engine.PolicySet).ExportVAP)
		},
	}
	cmd.Flags().StringVar(&at, "now", "", "the time exceptions' expiresAt is compared with (RFC 3339; default: now)")
	return cmd
}

// runExport loads the policies and exceptions under paths and prints what
// export makes of them.
func runExport(out, errOut io.Writer, paths []string, now time.Time, export func(*engine.PolicySet, time.Time) []exportpkg.Export) error {
	if errOut == nil {
		errOut = os.Stderr
	}
	objs, err := apply.ReadObjects(paths...)
	if err != nil {
		return err
	}
	var policyObjs []*manifest.Object
	for _, o := range objs {
		switch engine.Classify(o) {
		case engine.ClassPolicy, engine.ClassMutatingPolicy, engine.ClassException, engine.ClassNamespace:
			policyObjs = append(policyObjs, o)
		}
	}
	ps, err := apply.Compile(policyObjs, engine.Options{MutateExisting: true}, os.Stderr)
	if err != nil {
		return err
	}
	refused := 0
	first := true
	w := textout.New(out)
	for _, x := range export(ps, now) {
		if x.Refused != "" {
			refused++
			// Best-effort, on stderr: the exit status says a policy was
			// refused.
			_, _ = fmt.Fprintf(errOut, "%s %s: not exported: %s\n", x.Kind, x.Policy, x.Refused)
			continue
		}
		for _, o := range x.Objects {
			if !first {
				w.Println("---")
			}
			first = false
			b, err := yaml.Marshal(o)
			if err != nil {
				return exitWith(exitLoad, "%v", err)
			}
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
	}
	if err := w.Err(); err != nil {
		return err
	}
	if refused > 0 {
		return exitWith(exitDenied, "")
	}
	return nil
}
