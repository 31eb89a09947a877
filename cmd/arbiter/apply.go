package main

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/report"
	"github.com/arbiter-pdp/arbiter/internal/gctune"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
)

type applyOptions struct {
	resources  []string
	exceptions []string
	candidates []string
	server     string
	mode       string
	operation  string
	output     string
	failOn     string
	progress   string
}

func newApplyCommand() *cobra.Command {
	var o applyOptions
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

With --server ADDR the resources are decided by the Arbiter server (its
policies; the inputs may then hold only resources and Namespaces), all in one
stream pinned to one revision (admission mode unless --mode background).
--candidate PATH adds policy objects that are not committed: every resource is
decided with and without them, and the difference is printed ("would now deny
3 manifests").

Output: a table, PolicyReports (-o json | yaml, one per resource), or JUnit XML
(-o junit) for CI systems.

Exit status: 0, or 1 when a request would be denied (a Deny policy fails) —
with --fail-on fail, when any result is fail or error; with --fail-on warn, when
any is fail, error or warn; with --candidate, when the candidates would deny a
manifest allowed now. 2 when an input cannot be loaded (the message names the
file, the object and the field) or the server cannot be reached.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runApply(cmd.Context(), cmd.OutOrStdout(), args, &o)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.resources, "resource", nil, "file or folder of resources to evaluate (repeatable)")
	f.StringArrayVar(&o.exceptions, "exception", nil, "file or folder of PolicyExceptions (repeatable)")
	f.StringArrayVar(&o.candidates, "candidate", nil, "with --server: policy objects to try without committing them (repeatable)")
	f.StringVar(&o.server, "server", "", "evaluate on the Arbiter server at ADDR instead of locally")
	f.StringVar(&o.mode, "mode", "", "admission or background: apply the policies' evaluation gates")
	f.StringVar(&o.operation, "operation", "CREATE", "admission operation: CREATE, UPDATE, DELETE")
	f.StringVarP(&o.output, "output", "o", "table", "output: table, json, yaml (PolicyReports) or junit")
	f.StringVar(&o.failOn, "fail-on", "", "exit 1 on any result of this severity: fail or warn (default: on a denial)")
	f.StringVar(&o.progress, "progress", "auto", "progress on stderr: auto (a terminal and many resources), always or never")
	return cmd
}

// outcome is the decision of one resource.
type outcome struct {
	resource  *engine.Object
	namespace string
	decision  *arbiterv1.DecideResponse
	candidate *arbiterv1.DecideResponse
	changed   bool
	// report is the outcome's PolicyReport, and reportJSON its -o json
	// encoding (when that is the output), made by finish.
	report     report.Report
	reportJSON []byte
}

// finish makes the outcome's report (and its JSON for -o json), where the
// outcome is decided: in parallel, while other outcomes are decided.
func (oc *outcome) finish(format string) {
	gvk := schema.FromAPIVersionAndKind(oc.resource.APIVersion, oc.resource.Kind)
	oc.report = report.New(oc.resource.APIVersion, oc.resource.Kind, oc.namespace, oc.resource.Name,
		engine.IsNamespaced(gvk.GroupKind()), reportResults(oc.decision.GetResults()))
	if format == "json" {
		oc.reportJSON = oc.report.AppendJSON(make([]byte, 0, 1024+512*len(oc.report.Results)), "  ")
	}
}

func runApply(ctx context.Context, out io.Writer, args []string, o *applyOptions) error {
	gctune.Apply()
	if ctx == nil {
		ctx = context.Background()
	}
	if len(args) == 0 && len(o.resources) == 0 {
		return exitWith(exitLoad, "no paths given (see arbiter apply -h)")
	}
	switch o.output {
	case "table", "json", "yaml", "junit":
	default:
		return exitWith(exitLoad, "-o: unknown output %q (table, json, yaml, junit)", o.output)
	}
	switch o.failOn {
	case "", "fail", "warn":
	default:
		return exitWith(exitLoad, "--fail-on: unknown severity %q (fail, warn)", o.failOn)
	}
	if len(o.candidates) > 0 && o.server == "" {
		return exitWith(exitLoad, "--candidate needs --server (locally, add the objects to the paths)")
	}
	dflt := engine.ModeCLI
	if o.server != "" {
		dflt = engine.ModeAdmission
	}
	mode, err := parseMode(o.mode, dflt)
	if err != nil {
		return err
	}
	in, err := loadInputs(args, o.resources, o.exceptions)
	if err != nil {
		return err
	}
	reqs := make([]*engine.Request, len(in.resources))
	for i, res := range in.resources {
		if reqs[i], err = requestFor(res, o.operation, mode); err != nil {
			return err
		}
	}
	prog := newProgress(o.progress, len(reqs))
	var outcomes []outcome
	var whatIf *arbiterv1.WhatIfSummary
	start := time.Now()
	if o.server != "" {
		candidates, err := readObjects(o.candidates...)
		if err != nil {
			return err
		}
		outcomes, whatIf, err = decideRemote(ctx, o.server, in, reqs, candidates, prog, o.output)
		if err != nil {
			return err
		}
	} else {
		ps, err := compile(in.objects, engine.Options{})
		if err != nil {
			return err
		}
		outcomes = decideLocal(ctx, ps, in.resources, reqs, prog, o.output)
	}
	prog.done(time.Since(start))
	if whatIf != nil {
		if err := writeWhatIf(out, o.output, outcomes, whatIf); err != nil {
			return err
		}
		if whatIf.GetNewlyDenied() > 0 {
			return exitWith(exitDenied, "")
		}
		return nil
	}
	if o.output == "json" {
		encoded := make([][]byte, len(outcomes))
		for i := range outcomes {
			encoded[i] = outcomes[i].reportJSON
		}
		if err := writeJSONArray(out, encoded); err != nil {
			return err
		}
	} else {
		reports := make([]report.Report, len(outcomes))
		for i := range outcomes {
			reports[i] = outcomes[i].report
		}
		if err := writeReports(out, o.output, reports); err != nil {
			return err
		}
	}
	if failed(outcomes, o.failOn) {
		return exitWith(exitDenied, "")
	}
	return nil
}

// failed applies the exit rule.
func failed(outcomes []outcome, failOn string) bool {
	for _, oc := range outcomes {
		if failOn == "" && !oc.decision.GetAllowed() {
			return true
		}
		for _, r := range oc.decision.GetResults() {
			switch r.GetResult() {
			case engine.ResultFail, engine.ResultError:
				if failOn != "" {
					return true
				}
			case engine.ResultWarn:
				if failOn == "warn" {
					return true
				}
			}
		}
	}
	return false
}

// decideLocal evaluates every request on the compiled set, in parallel.
func decideLocal(ctx context.Context, ps *engine.PolicySet, resources []*engine.Object, reqs []*engine.Request, prog *progress, format string) []outcome {
	outcomes := make([]outcome, len(reqs))
	parallelDo(len(reqs), func(i int) {
		outcomes[i] = outcome{resource: resources[i], namespace: reqs[i].Namespace,
			decision: server.ResponseFromDecision(ps.Evaluate(ctx, reqs[i]))}
		outcomes[i].finish(format)
		prog.add(1)
	})
	return outcomes
}

func writeReports(out io.Writer, format string, reports []report.Report) error {
	switch format {
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
	case "junit":
		return writeJUnit(out, reports)
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

// writeJSONArray writes encoded JSON values (indented one level) as the
// elements of an indented array.
func writeJSONArray(out io.Writer, encoded [][]byte) error {
	if len(encoded) == 0 {
		_, err := io.WriteString(out, "[]\n")
		return err
	}
	w := bufio.NewWriterSize(out, 1<<16)
	w.WriteString("[\n  ")
	for i, b := range encoded {
		if i > 0 {
			w.WriteString(",\n  ")
		}
		w.Write(b)
	}
	w.WriteString("\n]\n")
	return w.Flush()
}

// JUnit XML: one test suite per resource, one test case per policy result.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Error     *junitMessage `xml:"error,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Body    string `xml:",chardata"`
}

func writeJUnit(out io.Writer, reports []report.Report) error {
	all := junitSuites{Name: "arbiter apply"}
	for _, r := range reports {
		suite := junitSuite{Name: resourceName(r.Scope.Kind, r.Scope.Namespace, r.Scope.Name)}
		for _, res := range r.Results {
			name := res.Policy
			if res.Rule != "" {
				name += "/" + res.Rule
			}
			c := junitCase{Name: name, Classname: suite.Name}
			msg := &junitMessage{Message: oneLine(res.Message), Body: res.Message}
			switch res.Result {
			case "fail":
				msg.Type = "fail"
				c.Failure = msg
				suite.Failures++
			case "warn":
				msg.Type = "warn"
				c.Failure = msg
				suite.Failures++
			case "error":
				msg.Type = "error"
				c.Error = msg
				suite.Errors++
			case "skip":
				c.Skipped = msg
				suite.Skipped++
			default:
				c.SystemOut = res.Message
			}
			suite.Cases = append(suite.Cases, c)
			suite.Tests++
		}
		all.Tests += suite.Tests
		all.Failures += suite.Failures
		all.Errors += suite.Errors
		all.Skipped += suite.Skipped
		all.Suites = append(all.Suites, suite)
	}
	fmt.Fprint(out, xml.Header)
	enc := xml.NewEncoder(out)
	enc.Indent("", "  ")
	if err := enc.Encode(all); err != nil {
		return err
	}
	fmt.Fprintln(out)
	return nil
}

// writeWhatIf prints how candidate objects change the verdicts.
func writeWhatIf(out io.Writer, format string, outcomes []outcome, sum *arbiterv1.WhatIfSummary) error {
	type item struct {
		Resource    string   `json:"resource"`
		AllowedNow  bool     `json:"allowedNow"`
		AllowedThen bool     `json:"allowedWithCandidates"`
		Changes     []string `json:"changes"`
	}
	doc := struct {
		Summary        string `json:"summary"`
		NewlyDenied    uint32 `json:"newlyDenied"`
		NewlyAllowed   uint32 `json:"newlyAllowed"`
		ResultsChanged uint32 `json:"resultsChanged"`
		Items          []item `json:"items"`
	}{Summary: sum.GetSummary(), NewlyDenied: sum.GetNewlyDenied(), NewlyAllowed: sum.GetNewlyAllowed(), ResultsChanged: sum.GetResultsChanged(), Items: []item{}}
	for _, oc := range outcomes {
		if !oc.changed {
			continue
		}
		doc.Items = append(doc.Items, item{
			Resource:   resourceName(oc.resource.Kind, oc.namespace, oc.resource.Name),
			AllowedNow: oc.decision.GetAllowed(), AllowedThen: oc.candidate.GetAllowed(),
			Changes: diffResults(oc.decision, oc.candidate),
		})
	}
	switch format {
	case "json":
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(doc)
	case "yaml":
		b, err := yaml.Marshal(doc)
		if err != nil {
			return err
		}
		_, err = out.Write(b)
		return err
	}
	for _, it := range doc.Items {
		verdict := func(a bool) string {
			if a {
				return "allowed"
			}
			return "denied"
		}
		fmt.Fprintf(out, "%s: %s now, %s with the candidates\n", it.Resource, verdict(it.AllowedNow), verdict(it.AllowedThen))
		for _, c := range it.Changes {
			fmt.Fprintf(out, "  %s\n", c)
		}
	}
	fmt.Fprintf(out, "\n%s (%d resources)\n", doc.Summary, len(outcomes))
	return nil
}

// diffResults lists per policy how a result changes.
func diffResults(now, then *arbiterv1.DecideResponse) []string {
	key := func(r *arbiterv1.PolicyResult) string { return r.GetPolicy() }
	before := map[string]*arbiterv1.PolicyResult{}
	for _, r := range now.GetResults() {
		before[key(r)] = r
	}
	var out []string
	seen := map[string]bool{}
	for _, r := range then.GetResults() {
		seen[key(r)] = true
		b, ok := before[key(r)]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: (none) -> %s %s", r.GetPolicy(), r.GetResult(), oneLine(r.GetMessage())))
		case b.GetResult() != r.GetResult() || b.GetMessage() != r.GetMessage():
			out = append(out, fmt.Sprintf("%s: %s -> %s %s", r.GetPolicy(), b.GetResult(), r.GetResult(), oneLine(r.GetMessage())))
		}
	}
	for _, r := range now.GetResults() {
		if !seen[key(r)] {
			out = append(out, fmt.Sprintf("%s: %s -> (none)", r.GetPolicy(), r.GetResult()))
		}
	}
	return out
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}

// progress draws a bar on stderr for long runs on a terminal.
type progress struct {
	on    bool
	total int
	n     int
	last  time.Time
	mu    chan struct{}
}

func newProgress(mode string, total int) *progress {
	p := &progress{total: total, mu: make(chan struct{}, 1)}
	switch mode {
	case "always":
		p.on = true
	case "never":
	default:
		fi, err := os.Stderr.Stat()
		p.on = err == nil && fi.Mode()&os.ModeCharDevice != 0 && total >= 200
	}
	return p
}

func (p *progress) add(k int) {
	if !p.on {
		return
	}
	p.mu <- struct{}{}
	defer func() { <-p.mu }()
	p.n += k
	if time.Since(p.last) < 100*time.Millisecond && p.n < p.total {
		return
	}
	p.last = time.Now()
	const width = 30
	filled := width * p.n / max(p.total, 1)
	fmt.Fprintf(os.Stderr, "\r[%s%s] %d/%d", strings.Repeat("#", filled), strings.Repeat(".", width-filled), p.n, p.total)
}

func (p *progress) done(took time.Duration) {
	if !p.on {
		return
	}
	rate := float64(p.total) / took.Seconds()
	fmt.Fprintf(os.Stderr, "\r%d resources in %v (%.0f/s)%s\n", p.total, took.Round(time.Millisecond), rate, strings.Repeat(" ", 20))
}
