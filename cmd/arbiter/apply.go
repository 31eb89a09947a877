package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/report"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
)

type applyOptions struct {
	resources  []string
	exceptions []string
	server     string
	mode       string
	operation  string
	output     string
}

func newApplyCommand() *cobra.Command {
	var o applyOptions
	cmd := &cobra.Command{
		Use:   "apply PATH... [--resource PATH]... [--exception PATH]...",
		Short: "Evaluate every resource under the paths against every policy under them",
		Long: `Evaluate every resource against every policy.

PATH is a file or a folder of YAML or JSON manifests (multi-document files and
v1 List objects are fine; "-" reads stdin). Objects are sorted by kind:
ValidatingPolicy, NamespacedValidatingPolicy and PolicyException are policy
objects, Namespace objects give namespaceObject and namespace labels, and every
other object is a resource to evaluate.

Without --mode every policy is applied to every resource, as "kyverno apply"
does; --mode admission or background applies the policies' evaluation gates.

Exit status: 0 when no Deny policy fails, 1 when one does, 2 when an input
cannot be loaded (the message names the file, the object and the field).`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runApply(cmd.Context(), cmd.OutOrStdout(), args, &o)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.resources, "resource", nil, "file or folder of resources to evaluate (repeatable)")
	f.StringArrayVar(&o.exceptions, "exception", nil, "file or folder of PolicyExceptions (repeatable)")
	f.StringVar(&o.server, "server", "", "evaluate on the Arbiter server at ADDR instead of locally")
	f.StringVar(&o.mode, "mode", "", "admission or background: apply the policies' evaluation gates")
	f.StringVar(&o.operation, "operation", "CREATE", "admission operation: CREATE, UPDATE, DELETE")
	f.StringVarP(&o.output, "output", "o", "table", "output: table, json or yaml (PolicyReports)")
	return cmd
}

func runApply(ctx context.Context, out io.Writer, args []string, o *applyOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if len(args) == 0 && len(o.resources) == 0 {
		return exitWith(exitLoad, "no paths given (see arbiter apply -h)")
	}
	switch o.output {
	case "table", "json", "yaml":
	default:
		return exitWith(exitLoad, "-o: unknown output %q (table, json, yaml)", o.output)
	}
	mode, err := parseMode(o.mode, engine.ModeCLI)
	if err != nil {
		return err
	}
	in, err := loadInputs(args, o.resources, o.exceptions)
	if err != nil {
		return err
	}
	var reports []report.Report
	denied := false
	var eval func(*engine.Request) (*arbiterv1.DecideResponse, error)
	if o.server != "" {
		remote, err := newRemoteEvaluator(ctx, o.server, in.objects)
		if err != nil {
			return err
		}
		defer remote.Close()
		eval = remote.evaluate
	} else {
		ps, err := compile(in.objects, engine.Options{})
		if err != nil {
			return err
		}
		eval = func(req *engine.Request) (*arbiterv1.DecideResponse, error) {
			return server.ResponseFromDecision(ps.Evaluate(ctx, req)), nil
		}
	}
	for _, res := range in.resources {
		req, err := requestFor(res, o.operation, mode)
		if err != nil {
			return err
		}
		d, err := eval(req)
		if err != nil {
			return err
		}
		if !d.GetAllowed() {
			denied = true
		}
		gvk := schema.FromAPIVersionAndKind(res.APIVersion, res.Kind)
		ns := req.Namespace
		namespaced := engine.IsNamespaced(gvk.GroupKind())
		reports = append(reports, report.New(res.APIVersion, res.Kind, ns, res.Name, namespaced, reportResults(d.GetResults())))
	}
	if err := writeReports(out, o.output, reports); err != nil {
		return err
	}
	if denied {
		return exitWith(exitDenied, "")
	}
	return nil
}

func writeReports(out io.Writer, format string, reports []report.Report) error {
	switch format {
	case "json":
		if reports == nil {
			reports = []report.Report{}
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(reports)
	case "yaml":
		for i, r := range reports {
			if i > 0 {
				fmt.Fprintln(out, "---")
			}
			b, err := yaml.Marshal(r)
			if err != nil {
				return err
			}
			out.Write(b)
		}
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tPOLICY\tRESULT\tMESSAGE")
	var total report.Summary
	for _, r := range reports {
		name := resourceName(r.Scope.Kind, r.Scope.Namespace, r.Scope.Name)
		if len(r.Results) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\tno policy applies\n", name)
		}
		for _, res := range r.Results {
			policy := res.Policy
			if res.Rule != "" {
				policy += "/" + res.Rule
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, policy, res.Result, oneLine(res.Message))
			total.Add(res.Result)
		}
	}
	tw.Flush()
	fmt.Fprintf(out, "\n%d resources: %d pass, %d fail, %d warn, %d error, %d skip\n",
		len(reports), total.Pass, total.Fail, total.Warn, total.Error, total.Skip)
	return nil
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}
