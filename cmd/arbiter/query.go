package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/apply"
	"github.com/arbiter-pdp/arbiter/client"
	"github.com/arbiter-pdp/arbiter/clusterdata"
	"github.com/arbiter-pdp/arbiter/convert"
	"github.com/arbiter-pdp/arbiter/internal/textout"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// queryFlags are the flags every query command shares.
type queryFlags struct {
	server  string
	output  string
	timeout time.Duration
}

func (q *queryFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&q.server, "server", "", "address of an Arbiter replica (required)")
	cmd.Flags().StringVarP(&q.output, "output", "o", "table", "table, json or yaml")
	cmd.Flags().DurationVar(&q.timeout, "timeout", 10*time.Second, "deadline of the call")
}

func (q *queryFlags) dial(ctx context.Context) (*client.Client, context.Context, context.CancelFunc, error) {
	if q.server == "" {
		return nil, nil, nil, exitWith(exitLoad, "--server is required")
	}
	switch q.output {
	case "table", "json", "yaml":
	default:
		return nil, nil, nil, exitWith(exitLoad, "-o: unknown output %q (table, json, yaml)", q.output)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	c, err := dialServer(ctx, q.server)
	if err != nil {
		return nil, nil, nil, exitWith(exitLoad, "%v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, q.timeout)
	return c, cctx, cancel, nil
}

// writeProto prints a response as JSON or YAML (proto field names).
func writeProto(out io.Writer, format string, m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: false}.Marshal(m)
	if err != nil {
		return err
	}
	if format == "yaml" {
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		return writeYAML(out, v)
	}
	_, err = fmt.Fprintln(out, string(b))
	return err
}

func newExplainCommand() *cobra.Command {
	var q queryFlags
	var file, operation, mode, user string
	var groups []string
	cmd := &cobra.Command{
		Use:   "explain -f RESOURCE --server ADDR",
		Short: "Explain a decision: every condition, variable, validation and exception evaluated, in order",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return exitWith(exitLoad, "-f RESOURCE is required")
			}
			obj, err := apply.ReadOne(file)
			if err != nil {
				return err
			}
			m, err := apply.ParseMode(mode, 0)
			if err != nil {
				return err
			}
			req, err := apply.RequestFor(obj, operation, m)
			if err != nil {
				return err
			}
			req.UserInfo.Username, req.UserInfo.Groups = user, groups
			pr, err := convert.RequestToProto(req)
			if err != nil {
				return exitWith(exitLoad, "%v", err)
			}
			c, ctx, cancel, err := q.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			defer cancel()
			resp, err := c.Query.Explain(ctx, &arbiterv1.ExplainRequest{Request: pr})
			if err != nil {
				return exitWith(exitLoad, "%s", client.Describe(err))
			}
			if q.output != "table" {
				return writeProto(cmd.OutOrStdout(), q.output, resp)
			}
			return writeExplain(cmd.OutOrStdout(), resp)
		},
	}
	q.add(cmd)
	cmd.Flags().StringVarP(&file, "file", "f", "", "the object to explain the decision on")
	cmd.Flags().StringVar(&operation, "operation", "CREATE", "admission operation")
	cmd.Flags().StringVar(&mode, "mode", "admission", "admission or background")
	cmd.Flags().StringVar(&user, "user", "", "requesting user name")
	cmd.Flags().StringArrayVar(&groups, "group", nil, "requesting user's group (repeatable)")
	return cmd
}

func writeExplain(w io.Writer, resp *arbiterv1.ExplainResponse) error {
	d := resp.GetDecision()
	verdict := "ALLOWED"
	if !d.GetAllowed() {
		verdict = "DENIED"
	}
	text := textout.New(w)
	text.Printf("%s at revision %d (%s)\n", verdict, d.GetRevision(), d.GetDigest())
	if m := d.GetStatus().GetMessage(); m != "" {
		text.Printf("  %s\n", m)
	}
	policy := ""
	for _, s := range resp.GetSteps() {
		head := s.GetPolicy()
		if v := s.GetVariant(); v != "" {
			if !strings.HasPrefix(v, "binding ") {
				v = "autogen " + v
			}
			head += " (" + v + ")"
		}
		if head != policy {
			policy = head
			text.Printf("\n%s\n", policy)
		}
		label := s.GetPhase()
		if s.GetName() != "" {
			label += "[" + s.GetName() + "]"
		}
		if s.GetException() != "" && s.GetPhase() != "result" {
			label += " " + s.GetException()
		}
		switch {
		case s.GetNote() != "":
			text.Printf("  %-34s %s\n", label, s.GetNote())
		case s.GetError() != "":
			text.Printf("  %-34s %s\n  %-34s ERROR %s\n", label, apply.OneLine(s.GetExpression()), "", s.GetError())
		default:
			text.Printf("  %-34s %s\n  %-34s = %s\n", label, apply.OneLine(s.GetExpression()), "", apply.OneLine(s.GetValue()))
		}
	}
	if reads := resp.GetContextReads(); len(reads) > 0 {
		text.Printf("\ncontext read at revision %d\n", d.GetRevision())
		for _, r := range reads {
			text.Printf("  %s\n", contextReadLine(r))
		}
	}
	return text.Err()
}

// contextReadLine renders a context read as clusterdata.Read.String does.
func contextReadLine(r *arbiterv1.ContextRead) string {
	return clusterdata.Read{Op: r.GetOp(), APIVersion: r.GetApiVersion(), Resource: r.GetResource(), Namespace: r.GetNamespace(),
		Name: r.GetName(), Selector: r.GetSelector(), Projection: r.GetProjection(), Count: int(r.GetCount()), Error: r.GetError()}.String()
}

func newGetCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get policies|exceptions|applicable",
		Short: "Query a replica's inventory: policies, exceptions, what applies to an object",
	}
	var q queryFlags
	var kind, namespace, action, selector string
	policies := &cobra.Command{
		Use:     "policies [NAME]",
		Aliases: []string{"policy"},
		Short:   "List policies (or show one, with its exceptions)",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, cancel, err := q.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			defer cancel()
			if len(args) == 1 {
				resp, err := c.Query.GetPolicy(ctx, &arbiterv1.GetPolicyRequest{Kind: kind, Namespace: namespace, Name: args[0]})
				if err != nil {
					return exitWith(exitLoad, "%s", client.Describe(err))
				}
				if q.output != "table" {
					return writeProto(cmd.OutOrStdout(), q.output, resp)
				}
				w := textout.New(cmd.OutOrStdout())
				if err := writePolicies(w, resp.GetRevision(), []*arbiterv1.PolicyInfo{resp.GetPolicy()}, true); err != nil {
					return err
				}
				w.Println()
				return writeExceptions(w, resp.GetRevision(), resp.GetExceptions())
			}
			resp, err := c.Query.ListPolicies(ctx, &arbiterv1.ListPoliciesRequest{Kind: kind, Namespace: namespace, Action: action,
				LabelSelector: selector, WithoutManifests: q.output == "table"})
			if err != nil {
				return exitWith(exitLoad, "%s", client.Describe(err))
			}
			if q.output != "table" {
				return writeProto(cmd.OutOrStdout(), q.output, resp)
			}
			return writePolicies(cmd.OutOrStdout(), resp.GetRevision(), resp.GetPolicies(), false)
		},
	}
	q.add(policies)
	policies.Flags().StringVar(&kind, "kind", "", "ValidatingPolicy, NamespacedValidatingPolicy, ValidatingAdmissionPolicy or PodSecurity (names baseline, restricted)")
	policies.Flags().StringVarP(&namespace, "namespace", "n", "", "namespace (namespaced policies)")
	policies.Flags().StringVar(&action, "action", "", "only policies with this validationAction (Deny, Warn, Audit)")
	policies.Flags().StringVarP(&selector, "selector", "l", "", "label selector")

	var q2 queryFlags
	var policy, exNamespace string
	var expiringWithin time.Duration
	var controls string
	exceptions := &cobra.Command{
		Use:     "exceptions",
		Aliases: []string{"exception", "polex"},
		Short:   "List exceptions, with the policies they reference and whether those exist",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ctx, cancel, err := q2.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			defer cancel()
			req := &arbiterv1.ListExceptionsRequest{Policy: policy, Namespace: exNamespace, WithoutManifests: q2.output == "table"}
			if expiringWithin > 0 {
				req.ExpiringBefore = timestamppb.New(time.Now().Add(expiringWithin))
			}
			switch controls {
			case "":
			case "yes", "true":
				t := true
				req.HasControls = &t
			case "no", "false":
				f := false
				req.HasControls = &f
			default:
				return exitWith(exitLoad, "--controls: yes or no")
			}
			resp, err := c.Query.ListExceptions(ctx, req)
			if err != nil {
				return exitWith(exitLoad, "%s", client.Describe(err))
			}
			if q2.output != "table" {
				return writeProto(cmd.OutOrStdout(), q2.output, resp)
			}
			return writeExceptions(cmd.OutOrStdout(), resp.GetRevision(), resp.GetExceptions())
		},
	}
	q2.add(exceptions)
	exceptions.Flags().StringVar(&policy, "policy", "", "only exceptions referencing this policy")
	exceptions.Flags().StringVarP(&exNamespace, "namespace", "n", "", "only exceptions in this namespace")
	exceptions.Flags().DurationVar(&expiringWithin, "expiring-within", 0, "only exceptions expiring within this duration (e.g. 720h)")
	exceptions.Flags().StringVar(&controls, "controls", "", "yes: only exceptions with compensating controls; no: only without")

	var q3 queryFlags
	var file string
	applicable := &cobra.Command{
		Use:   "applicable -f RESOURCE",
		Short: "Which policies match an object and which exceptions could apply (validations not evaluated)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return exitWith(exitLoad, "-f RESOURCE is required")
			}
			obj, err := apply.ReadOne(file)
			if err != nil {
				return err
			}
			b, err := json.Marshal(obj.Content)
			if err != nil {
				return exitWith(exitLoad, "%v", err)
			}
			c, ctx, cancel, err := q3.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			defer cancel()
			resp, err := c.Query.Applicable(ctx, &arbiterv1.ApplicableRequest{ObjectJson: b})
			if err != nil {
				return exitWith(exitLoad, "%s", client.Describe(err))
			}
			if q3.output != "table" {
				return writeProto(cmd.OutOrStdout(), q3.output, resp)
			}
			w := textout.New(cmd.OutOrStdout())
			w.Printf("revision %d: %d policies apply\n", resp.GetRevision(), len(resp.GetPolicies()))
			for _, p := range resp.GetPolicies() {
				name := qualifiedName(p.GetPolicy().GetNamespace(), p.GetPolicy().GetName())
				variant := ""
				if p.GetVariant() != "" {
					variant = " (autogen " + p.GetVariant() + ")"
				}
				for _, u := range p.GetPolicy().GetPodSecurity() {
					variant += " " + u.GetMode() + "=" + name + ":" + u.GetVersion()
				}
				w.Printf("  %s %s%s [%s]\n", p.GetPolicy().GetKind(), name, variant, strings.Join(p.GetPolicy().GetActions(), ","))
				for _, e := range p.GetExceptions() {
					w.Printf("    exception %s: %s\n", qualifiedName(e.GetException().GetNamespace(), e.GetException().GetName()), e.GetMatch())
				}
			}
			return w.Err()
		},
	}
	q3.add(applicable)
	applicable.Flags().StringVarP(&file, "file", "f", "", "the object")
	cmd.AddCommand(policies, exceptions, applicable)
	return cmd
}

func qualifiedName(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// kindPodSecurity is the policy kind of the Pod Security levels.
const kindPodSecurity = "PodSecurity"

// writePolicies prints policies as a table and, when Pod Security levels
// are among them, where each is in effect (all: every namespace; else at
// most maxNamespaces per line).
func writePolicies(w io.Writer, rev uint64, ps []*arbiterv1.PolicyInfo, all bool) error {
	tw := textout.New(tabwriter.NewWriter(w, 0, 4, 2, ' ', 0))
	tw.Printf("KIND\tNAME\tACTIONS\tRESOURCES\tEXCEPTIONS\n")
	var levels []*arbiterv1.PolicyInfo
	for _, p := range ps {
		resources := strings.Join(p.GetResources(), ",")
		if p.GetKind() == kindPodSecurity {
			levels = append(levels, p)
			if n := len(p.GetResources()); n > 1 {
				// v1/pods and the workload resources that embed a pod template.
				resources = fmt.Sprintf("%s,+%d workload resources", p.GetResources()[0], n-1)
			}
		}
		actions := strings.Join(p.GetActions(), ",")
		if actions == "" {
			actions = "-"
		}
		if resources == "" {
			resources = "-"
		}
		tw.Printf("%s\t%s\t%s\t%s\t%d\n", p.GetKind(), qualifiedName(p.GetNamespace(), p.GetName()),
			actions, resources, len(p.GetExceptions()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	text := textout.New(w)
	text.Printf("revision %d: %d policies\n", rev, len(ps))
	if len(levels) > 0 {
		text.Println()
		if err := writePodSecurityUses(text, levels, all); err != nil {
			return err
		}
	}
	return text.Err()
}

// maxNamespaces bounds the namespaces listed per line of the Pod Security
// table of a policy list.
const maxNamespaces = 8

// writePodSecurityUses prints where Pod Security levels are in effect: per
// level, mode and version, the configuration's defaults and the namespaces.
func writePodSecurityUses(w io.Writer, levels []*arbiterv1.PolicyInfo, all bool) error {
	tw := textout.New(tabwriter.NewWriter(w, 0, 4, 2, ' ', 0))
	tw.Printf("POD SECURITY\tMODE\tVERSION\tIN EFFECT IN\n")
	for _, p := range levels {
		if len(p.GetPodSecurity()) == 0 {
			tw.Printf("%s\t-\t-\tno namespace (named by exceptions only)\n", p.GetName())
			continue
		}
		for _, u := range p.GetPodSecurity() {
			var where []string
			if u.GetDefaults() {
				where = append(where, "(configuration defaults)")
			}
			ns := u.GetNamespaces()
			if !all && len(ns) > maxNamespaces {
				where = append(where, strings.Join(ns[:maxNamespaces], ", ")+fmt.Sprintf(" (+%d more)", len(ns)-maxNamespaces))
			} else if len(ns) > 0 {
				where = append(where, strings.Join(ns, ", "))
			}
			tw.Printf("%s\t%s\t%s\t%s\n", p.GetName(), u.GetMode(), u.GetVersion(), strings.Join(where, " "))
		}
	}
	return tw.Flush()
}

func writeExceptions(w io.Writer, rev uint64, es []*arbiterv1.ExceptionInfo) error {
	tw := textout.New(tabwriter.NewWriter(w, 0, 4, 2, ' ', 0))
	tw.Printf("EXCEPTION\tPOLICIES\tEXPIRES\tCONTROLS\tEFFECT\n")
	for _, e := range es {
		var refs []string
		for _, r := range e.GetPolicies() {
			ref := r.GetKind() + "/" + r.GetName()
			if !r.GetExists() {
				ref += " (missing)"
			}
			refs = append(refs, ref)
		}
		expires := "never"
		if e.GetExpiresAt() != nil {
			expires = e.GetExpiresAt().AsTime().Format(time.RFC3339)
			if e.GetExpired() {
				expires += " (expired)"
			}
		}
		effect := e.GetReportResult()
		if !e.GetFull() {
			effect = "images/values"
		}
		tw.Printf("%s\t%s\t%s\t%v\t%s\n", qualifiedName(e.GetNamespace(), e.GetName()), strings.Join(refs, ","), expires, e.GetHasControls(), effect)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "revision %d: %d exceptions\n", rev, len(es))
	return err
}

func writeYAML(out io.Writer, v any) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	_, err = out.Write(b)
	return err
}
