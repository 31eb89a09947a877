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
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

func newExportCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Export policies to other formats",
	}
	cmd.AddCommand(newExportVAPCommand())
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
			now := time.Now()
			if at != "" {
				t, err := time.Parse(time.RFC3339, at)
				if err != nil {
					return exitWith(exitLoad, "--now: %v", err)
				}
				now = t
			}
			return runExportVAP(cmd.OutOrStdout(), cmd.ErrOrStderr(), args, now)
		},
	}
	cmd.Flags().StringVar(&at, "now", "", "the time exceptions' expiresAt is compared with (RFC 3339; default: now)")
	return cmd
}

func runExportVAP(out, errOut io.Writer, paths []string, now time.Time) error {
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
		case engine.ClassPolicy, engine.ClassException, engine.ClassNamespace:
			policyObjs = append(policyObjs, o)
		}
	}
	ps, err := apply.Compile(policyObjs, engine.Options{}, os.Stderr)
	if err != nil {
		return err
	}
	refused := 0
	first := true
	for _, x := range ps.ExportVAP(now) {
		if x.Refused != "" {
			refused++
			fmt.Fprintf(errOut, "%s %s: not exported: %s\n", x.Kind, x.Policy, x.Refused)
			continue
		}
		for _, o := range x.Objects {
			if !first {
				fmt.Fprintln(out, "---")
			}
			first = false
			b, err := yaml.Marshal(o)
			if err != nil {
				return exitWith(exitLoad, "%v", err)
			}
			out.Write(b)
		}
	}
	if refused > 0 {
		return exitWith(exitDenied, "")
	}
	return nil
}
