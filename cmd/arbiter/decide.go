package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/apply"
	"github.com/arbiter-pdp/arbiter/client"
	"github.com/arbiter-pdp/arbiter/convert"
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/internal/textout"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

type decideOptions struct {
	file        string
	oldFile     string
	server      string
	minRevision uint64
	operation   string
	mode        string
	user        string
	groups      []string
	namespace   string
	dryRun      bool
	output      string
	timeout     time.Duration
	context     apply.ContextOptions
	images      imageVerifierFlags
}

// decisionOutput is what `decide -o json` prints.
type decisionOutput struct {
	Allowed          bool              `json:"allowed"`
	Warnings         []string          `json:"warnings"`
	Results          []resultOutput    `json:"results"`
	AuditAnnotations map[string]string `json:"auditAnnotations,omitempty"`
	Message          string            `json:"message,omitempty"`
	// Code and Reason are the HTTP status of a denial (400 for Kyverno
	// policies; a ValidatingAdmissionPolicy's reason, e.g. 422 Invalid).
	Code       int32  `json:"code,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Revision   uint64 `json:"revision"`
	Digest     string `json:"digest,omitempty"`
	DecisionID string `json:"decisionId,omitempty"`
	// Patch is the mutations as an RFC 6902 JSON patch (absent when
	// nothing was mutated).
	Patch     json.RawMessage `json:"patch,omitempty"`
	PatchType string          `json:"patchType,omitempty"`
}

type resultOutput struct {
	Policy     string            `json:"policy"`
	PolicyKind string            `json:"policyKind,omitempty"`
	Rule       string            `json:"rule"`
	Result     string            `json:"result"`
	Message    string            `json:"message"`
	Properties map[string]string `json:"properties"`
	Exceptions []string          `json:"exceptions,omitempty"`
	Actions    []string          `json:"actions,omitempty"`
}

func newDecideCommand() *cobra.Command {
	var o decideOptions
	cmd := &cobra.Command{
		Use:   "decide -f RESOURCE [--server ADDR [--min-revision N]] [PATH...]",
		Short: "Decide one admission request, locally on the policies under PATH or on a server",
		Long: `Decide one admission request for the object in RESOURCE.

With --server the decision is made by the Arbiter server at ADDR, at its
current revision (or at least --min-revision). Without it, the policies,
exceptions and Namespaces under PATH are compiled and evaluated locally; what
the policies read with resource.Get, resource.List and globalContext.Get comes
from --context FILE (context objects, GlobalContextEntries, Kyverno CLI context
files) or, read-only, from a live API server with --cluster [--kubeconfig FILE].

Exit status: 0 when allowed, 1 when denied, 2 on bad input or an unreachable server.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDecide(cmd.Context(), cmd.OutOrStdout(), args, &o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.file, "file", "f", "", "the object to decide on (YAML or JSON; - for stdin)")
	f.StringVar(&o.oldFile, "old", "", "the existing object, for UPDATE and DELETE")
	o.images.add(f)
	f.StringVar(&o.server, "server", "", "ask the Arbiter server at ADDR")
	f.Uint64Var(&o.minRevision, "min-revision", 0, "with --server: the smallest revision the decision may be made at")
	f.StringVar(&o.operation, "operation", "CREATE", "admission operation: CREATE, UPDATE, DELETE, CONNECT")
	f.StringVar(&o.mode, "mode", "admission", "admission or background")
	f.StringVar(&o.user, "user", "", "requesting user name")
	f.StringArrayVar(&o.groups, "group", nil, "requesting user's group (repeatable)")
	f.StringVarP(&o.namespace, "namespace", "n", "", "namespace of the request (default: the object's, or default)")
	f.BoolVar(&o.dryRun, "dry-run", false, "mark the request as a dry run")
	f.StringVarP(&o.output, "output", "o", "table", "output: table, json or yaml")
	f.DurationVar(&o.timeout, "timeout", 10*time.Second, "with --server: deadline of the call")
	addContextFlags(f, &o.context)
	return cmd
}

func runDecide(ctx context.Context, out io.Writer, args []string, o *decideOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if o.file == "" {
		return exitWith(exitLoad, "-f RESOURCE is required")
	}
	switch o.output {
	case "table", "json", "yaml":
	default:
		return exitWith(exitLoad, "-o: unknown output %q (table, json, yaml)", o.output)
	}
	obj, err := apply.ReadOne(o.file)
	if err != nil {
		return err
	}
	var old *manifest.Object
	if o.oldFile != "" {
		if old, err = apply.ReadOne(o.oldFile); err != nil {
			return err
		}
	}
	mode, err := apply.ParseMode(o.mode, admission.ModeAdmission)
	if err != nil {
		return err
	}
	req, err := apply.RequestFor(obj, o.operation, mode)
	if err != nil {
		return err
	}
	if old != nil {
		req.OldObject = old.Content
	}
	if o.namespace != "" {
		req.Namespace = o.namespace
	}
	req.UserInfo = admission.UserInfo{Username: o.user, Groups: o.groups}
	req.DryRun = o.dryRun

	var resp *arbiterv1.DecideResponse
	if o.server != "" {
		if len(args) > 0 {
			return exitWith(exitLoad, "with --server the policies are the server's: drop the PATH arguments")
		}
		if !o.context.Empty() {
			return exitWith(exitLoad, "with --server the context is the server's (store context objects beside the policies: arbiter push): drop --context and --cluster")
		}
		c, err := dialServer(ctx, o.server)
		if err != nil {
			return exitWith(exitLoad, "%v", err)
		}
		defer c.Close()
		cctx, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		pr, err := convert.RequestToProto(req)
		if err != nil {
			return exitWith(exitLoad, "%v", err)
		}
		pr.MinRevision = o.minRevision
		resp, err = c.Decide(cctx, pr)
		if err != nil {
			return exitWith(exitLoad, "%s", client.Describe(err))
		}
	} else {
		if o.minRevision != 0 {
			return exitWith(exitLoad, "--min-revision needs --server")
		}
		objs, err := apply.ReadObjects(args...)
		if err != nil {
			return err
		}
		ps, err := apply.Compile(objs, engine.Options{MutateExisting: true}, os.Stderr)
		if err != nil {
			return err
		}
		libs, err := apply.LoadContext(ctx, o.context, objs)
		if err != nil {
			return err
		}
		opts := engine.EvalOptions{Context: libs}
		if v, err := o.images.verifier(); err != nil {
			return err
		} else if v != nil {
			opts.ImageVerifier = v
		}
		resp = convert.ResponseFromDecision(ps.Evaluate(ctx, req, &opts))
	}
	if err := writeDecision(out, o.output, resp); err != nil {
		return err
	}
	if !resp.GetAllowed() {
		return exitWith(exitDenied, "")
	}
	return nil
}

func outputFromResponse(resp *arbiterv1.DecideResponse) decisionOutput {
	out := decisionOutput{
		Allowed:          resp.GetAllowed(),
		Warnings:         resp.GetWarnings(),
		AuditAnnotations: resp.GetAuditAnnotations(),
		Message:          resp.GetStatus().GetMessage(),
		Revision:         resp.GetRevision(),
		Code:             resp.GetStatus().GetCode(),
		Reason:           resp.GetStatus().GetReason(),
		Digest:           resp.GetDigest(),
		DecisionID:       resp.GetDecisionId(),
		Results:          []resultOutput{},
		Patch:            resp.GetPatch(),
		PatchType:        resp.GetPatchType(),
	}
	if out.Warnings == nil {
		out.Warnings = []string{}
	}
	for _, r := range resp.GetResults() {
		props := r.GetProperties()
		if props == nil {
			props = map[string]string{}
		}
		out.Results = append(out.Results, resultOutput{
			Policy: r.GetPolicy(), PolicyKind: r.GetPolicyKind(), Rule: r.GetRule(), Result: r.GetResult(),
			Message: r.GetMessage(), Properties: props, Exceptions: r.GetExceptions(), Actions: r.GetActions(),
		})
	}
	return out
}

func writeDecision(w io.Writer, format string, resp *arbiterv1.DecideResponse) error {
	out := outputFromResponse(resp)
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(out)
	case "yaml":
		b, err := yaml.Marshal(out)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	verdict := "ALLOWED"
	if !out.Allowed {
		verdict = "DENIED"
	}
	text := textout.New(w)
	text.Printf("%s (revision %d)\n", verdict, out.Revision)
	if out.Message != "" {
		text.Printf("  %s\n", out.Message)
	}
	for _, wn := range out.Warnings {
		text.Printf("  warning: %s\n", wn)
	}
	if len(out.Patch) > 0 {
		// One operation a line.
		var ops []json.RawMessage
		if json.Unmarshal(out.Patch, &ops) == nil {
			text.Printf("  patch (%s):\n", out.PatchType)
			for _, op := range ops {
				text.Printf("    %s\n", op)
			}
		}
	}
	if len(out.Results) > 0 {
		text.Println()
		tw := textout.New(tabwriter.NewWriter(text, 0, 4, 2, ' ', 0))
		tw.Println("POLICY\tRESULT\tMESSAGE")
		for _, r := range out.Results {
			p := r.Policy
			if r.Rule != "" {
				p += "/" + r.Rule
			}
			tw.Printf("%s\t%s\t%s\n", p, r.Result, apply.OneLine(r.Message))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return text.Err()
}
