package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/convert"
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/report"
	"github.com/arbiter-pdp/arbiter/internal/gctune"
	"github.com/arbiter-pdp/arbiter/internal/parallel"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/whatif"
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

// outcome is the decision of one resource: what the output and the exit
// status need of it, kept small (a run may decide many thousands).
type outcome struct {
	apiVersion, kind, namespace, name string
	// decision and candidate are the decisions; once finished, kept only
	// when the candidates change them (writeWhatIf shows the difference).
	decision  *arbiterv1.DecideResponse
	candidate *arbiterv1.DecideResponse
	changed   bool
	// The verdict, for the exit status.
	denied, anyFail, anyWarn bool
	// report is the outcome's PolicyReport (for -o table, yaml, junit).
	report report.Report
}

func newOutcome(res *engine.Object, namespace string) outcome {
	return outcome{apiVersion: res.APIVersion, kind: res.Kind, namespace: namespace, name: res.Name}
}

// Output formats of finish besides apply's -o values: whatIf keeps only
// what writeWhatIf needs.
const formatWhatIf = "what-if"

// finisher finishes outcomes for one output, where they are decided: in
// parallel, while other outcomes are decided. It makes what the output needs
// of each decision and drops the rest; for -o json it writes the reports
// as they are ready.
type finisher struct {
	format string
	json   *jsonArrayWriter
	// results remembers the JSON of report results (-o json).
	results report.ResultCache
}

// newFinisher finishes outcomes for format (or formatWhatIf), writing -o
// json to out.
func newFinisher(out io.Writer, format string) *finisher {
	f := &finisher{format: format}
	if format == "json" {
		f.json = newJSONArrayWriter(out)
	}
	return f
}

// finish finishes outcome i.
func (f *finisher) finish(i int, oc *outcome) {
	if f.json == nil {
		oc.finish(f.format, nil, nil)
		return
	}
	f.json.put(i, oc.finish(f.format, f.json.buffer(), &f.results))
}

// finishReport finishes outcome i, answered by the server with its
// PolicyReport (-o json): the report is written, re-indented as an array
// element.
func (f *finisher) finishReport(i int, oc *outcome, js []byte, sum *arbiterv1.ReportSummary) {
	oc.denied = !oc.decision.GetAllowed()
	oc.anyFail = sum.GetFail()+sum.GetError() > 0
	oc.anyWarn = sum.GetWarn() > 0
	oc.decision, oc.candidate = nil, nil
	f.json.put(i, appendIndented(f.json.buffer(), js, "  "))
}

// appendIndented appends JSON with prefix after each of its line breaks
// (all of them are between tokens: strings hold theirs escaped).
func appendIndented(dst, js []byte, prefix string) []byte {
	for {
		i := bytes.IndexByte(js, '\n')
		if i < 0 {
			return append(dst, js...)
		}
		dst = append(dst, js[:i+1]...)
		dst = append(dst, prefix...)
		js = js[i+1:]
	}
}

// finish makes what format needs of the outcome's decision and drops the
// rest: its report, or (-o json) its report's JSON appended to buf (results
// seen before taken from cache).
func (oc *outcome) finish(format string, buf []byte, cache *report.ResultCache) []byte {
	oc.denied = !oc.decision.GetAllowed()
	for _, r := range oc.decision.GetResults() {
		switch r.GetResult() {
		case engine.ResultFail, engine.ResultError:
			oc.anyFail = true
		case engine.ResultWarn:
			oc.anyWarn = true
		}
	}
	if format == formatWhatIf {
		if !oc.changed {
			oc.decision, oc.candidate = nil, nil
		}
		return nil
	}
	gvk := schema.FromAPIVersionAndKind(oc.apiVersion, oc.kind)
	rep := report.New(oc.apiVersion, oc.kind, oc.namespace, oc.name,
		engine.IsNamespaced(gvk.GroupKind()), convert.ReportResults(oc.decision.GetResults()))
	oc.decision, oc.candidate = nil, nil
	if format == "json" {
		return rep.AppendJSONCached(buf, "  ", cache)
	}
	oc.report = rep
	return nil
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
	var outcomes []outcome
	var whatIf *arbiterv1.WhatIfSummary
	var prog *progress
	// With -o json the reports are written as they are made (on an error
	// after the first, the output is cut short: exit status 2 says so).
	fin := newFinisher(out, o.output)
	start := time.Now()
	if o.server != "" {
		read, err := loadInputs(args, o.resources, o.exceptions)
		if err != nil {
			return err
		}
		in, err := remoteInputsOf(read, o.operation, mode)
		if err != nil {
			return err
		}
		// Reading left much garbage (the files, their documents): collect
		// it now, so the heap goal follows what is kept (the requests)
		// rather than the peak of reading — the stream then runs in a
		// smaller heap, with fewer fresh pages to fault in.
		runtime.GC()
		// Reading used every core; the stream is a pipeline of small steps
		// that runs best on one thread (no wake-ups across cores), leaving
		// the other cores to a server on the same machine: measured on 2
		// cores, +3% (docs/performance.md). GOMAXPROCS set by the user wins.
		if os.Getenv("GOMAXPROCS") == "" {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		}
		candidates, err := readObjects(o.candidates...)
		if err != nil {
			return err
		}
		if len(candidates) > 0 {
			fin = newFinisher(out, formatWhatIf)
		}
		prog = newProgress(o.progress, len(in.resources))
		start = time.Now()
		// decideRemote consumes in.
		outcomes, whatIf, err = decideRemote(ctx, o.server, in, candidates, prog, fin)
		if err != nil {
			return err
		}
	} else {
		in, err := loadInputs(args, o.resources, o.exceptions)
		if err != nil {
			return err
		}
		if _, err := requestFor(&engine.Object{}, o.operation, mode); err != nil {
			return err // an unknown --operation
		}
		ps, err := compile(in.objects, engine.Options{})
		if err != nil {
			return err
		}
		prog = newProgress(o.progress, len(in.resources))
		start = time.Now()
		if outcomes, err = decideLocal(ctx, ps, in.resources, o.operation, mode, prog, fin); err != nil {
			return err
		}
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
	if fin.json != nil {
		if err := fin.json.close(); err != nil {
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
		switch {
		case failOn == "" && oc.denied,
			failOn != "" && oc.anyFail,
			failOn == "warn" && oc.anyWarn:
			return true
		}
	}
	return false
}

// decideLocal evaluates every resource on the compiled set, in parallel,
// decoding each as it goes.
func decideLocal(ctx context.Context, ps *engine.PolicySet, resources []resourceDoc, operation string, mode engine.Mode, prog *progress, fin *finisher) ([]outcome, error) {
	outcomes := make([]outcome, len(resources))
	errs := make([]error, len(resources))
	parallel.For(len(resources), func(i int) {
		res, sizes, err := resources[i].decoded()
		var req *engine.Request
		if err == nil {
			req, err = requestFor(res, operation, mode)
		}
		if err != nil {
			errs[i] = err
			return
		}
		// The request's objects are res's content, measured while decoded.
		req.ObjectSizes = sizes
		outcomes[i] = newOutcome(res, req.Namespace)
		outcomes[i].decision = convert.ResponseFromDecision(ps.Evaluate(ctx, req))
		fin.finish(i, &outcomes[i])
		prog.add(1)
	})
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return outcomes, nil
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

// jsonArrayWriter writes -o json: the reports, in input order, as one
// indented JSON array — the bytes json.Encoder with SetIndent("", "  ") and
// SetEscapeHTML(false) writes for the slice of them — as they are made, out
// of order. Its memory is bounded by how far out of order they come, and it
// recycles their buffers.
type jsonArrayWriter struct {
	w    *bufio.Writer
	bufs sync.Pool

	mu      sync.Mutex
	next    int
	pending map[int][]byte
	err     error
}

func newJSONArrayWriter(out io.Writer) *jsonArrayWriter {
	return &jsonArrayWriter{w: bufio.NewWriterSize(out, 1<<16), pending: map[int][]byte{},
		bufs: sync.Pool{New: func() any {
			// Room for a report of 16 results without growing.
			b := make([]byte, 0, 16<<10)
			return &b
		}}}
}

// buffer returns an empty buffer for a report.
func (a *jsonArrayWriter) buffer() []byte {
	return (*a.bufs.Get().(*[]byte))[:0]
}

// put hands over report i, encoded (indented one level) in a buffer from
// buffer.
func (a *jsonArrayWriter) put(i int, b []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if i != a.next {
		a.pending[i] = b
		return
	}
	for {
		if a.next == 0 {
			a.w.WriteString("[\n  ")
		} else {
			a.w.WriteString(",\n  ")
		}
		if _, err := a.w.Write(b); err != nil && a.err == nil {
			a.err = err
		}
		done := b
		a.bufs.Put(&done)
		a.next++
		var ok bool
		if b, ok = a.pending[a.next]; !ok {
			return
		}
		delete(a.pending, a.next)
	}
}

// close ends the array, once every report is put.
func (a *jsonArrayWriter) close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.pending) > 0 {
		return fmt.Errorf("report %d was never made", a.next)
	}
	if a.next == 0 {
		a.w.WriteString("[]\n")
	} else {
		a.w.WriteString("\n]\n")
	}
	if err := a.w.Flush(); err != nil && a.err == nil {
		a.err = err
	}
	return a.err
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
			Resource:   resourceName(oc.kind, oc.namespace, oc.name),
			AllowedNow: oc.decision.GetAllowed(), AllowedThen: oc.candidate.GetAllowed(),
			Changes: diffLines(oc.decision, oc.candidate),
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

// diffLines says per policy how a result changes.
func diffLines(now, then *arbiterv1.DecideResponse) []string {
	var out []string
	for _, c := range whatif.Diff(now, then) {
		switch {
		case c.Before == nil:
			out = append(out, fmt.Sprintf("%s: (none) -> %s %s", c.Policy, c.After.GetResult(), oneLine(c.After.GetMessage())))
		case c.After == nil:
			out = append(out, fmt.Sprintf("%s: %s -> (none)", c.Policy, c.Before.GetResult()))
		default:
			out = append(out, fmt.Sprintf("%s: %s -> %s %s", c.Policy, c.Before.GetResult(), c.After.GetResult(), oneLine(c.After.GetMessage())))
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
