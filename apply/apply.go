// Package apply is `arbiter apply`'s batch pipeline: it reads manifests
// (policies, exceptions, the objects they read, and the resources to
// evaluate), decides every resource — locally on the compiled policies, or
// on an Arbiter server through one DecideStream pinned to one revision —
// and writes the outcome: a table, PolicyReports (JSON or YAML), JUnit XML,
// or, with what-if candidates, how they change the verdicts. It also holds
// the manifest reading and request building the CLI's other local
// commands (decide, push, export) share.
package apply

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/client"
	"github.com/arbiter-pdp/arbiter/clusterdata"
	"github.com/arbiter-pdp/arbiter/convert"
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	results "github.com/arbiter-pdp/arbiter/engine/outcome"
	"github.com/arbiter-pdp/arbiter/engine/patch"
	"github.com/arbiter-pdp/arbiter/engine/report"
	"github.com/arbiter-pdp/arbiter/internal/jsonenc"
	"github.com/arbiter-pdp/arbiter/internal/parallel"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// Options are an apply run's inputs and settings (arbiter apply's flags).
type Options struct {
	// Paths are files or folders of manifests: policy objects, the objects
	// policies read, and resources ("-": standard input).
	Paths []string
	// Resources and Exceptions are files or folders of resources to
	// evaluate and of PolicyExceptions only.
	Resources, Exceptions []string
	// Candidates are policy objects tried, with Server, without
	// committing them.
	Candidates []string
	// Server is the address of the Arbiter server that decides (empty:
	// locally), reached with ClientOptions.
	Server        string
	ClientOptions []client.Option
	// Mode is admission, background or empty (locally: every policy on
	// every resource; with Server: admission).
	Mode string
	// Operation is the admission operation (CREATE, UPDATE, DELETE).
	Operation string
	// Output is table, json, yaml or junit.
	Output string
	// FailOn is the exit rule: empty (a denial fails the run), fail or
	// warn (any result of that severity or worse does).
	FailOn string
	// Progress is auto, always or never: the progress bar on Stderr.
	Progress string
	// Context is what resource.Get/List and globalContext.Get read
	// locally (--context, --cluster); with Server, the server's stored
	// context objects are read instead.
	Context ContextOptions
	// Stderr receives warnings and the progress bar (nil: os.Stderr).
	Stderr io.Writer
	// ImageVerifier serves ImageValidatingPolicies locally (nil: their
	// results are errors).
	ImageVerifier kyvernocel.ImageVerifier
}

// ErrFailed is Run's answer when the run fails by its exit rule (a
// request would be denied, a result of the FailOn severity, a manifest the
// candidates would newly deny); its output is written. Any other error
// means the inputs could not be read or decided.
var ErrFailed = errors.New("apply: a resource failed")

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
	// object is the resource as JSON, kept (-o json, yaml, with --server)
	// until the decision says whether it was mutated; mutated is the
	// resource as the mutations left it (-o json, yaml), when they did,
	// and admitted the same as JSON (-o yaml).
	object, admitted []byte
	mutated          map[string]any
	// generated are the objects the GeneratingPolicies would create from
	// the resource (-o json, yaml); generatedJSON the same as JSON (-o yaml).
	generated     []map[string]any
	generatedJSON [][]byte
}

func newOutcome(res *manifest.Object, namespace string) outcome {
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
// PolicyReport (-o json) and, when a mutation changed the resource, the
// resource as it would be admitted: both are written, re-indented as array
// elements.
func (f *finisher) finishReport(i int, oc *outcome, js, admitted []byte, sum *arbiterv1.ReportSummary) {
	oc.denied = !oc.decision.GetAllowed()
	oc.anyFail = sum.GetFail()+sum.GetError() > 0
	oc.anyWarn = sum.GetWarn() > 0
	buf := f.json.buffer()
	if admitted != nil {
		oc.object = nil
		buf = append(appendElement(buf, admitted), ",\n  "...)
	} else {
		oc.applyPatch()
		buf = oc.appendAdmitted(buf)
	}
	oc.decision, oc.candidate = nil, nil
	f.json.put(i, appendElement(buf, js))
}

// elementPrefix starts each line but the first of an element of the -o
// json array.
const elementPrefix = "  "

// appendElement appends the server's indented JSON as an element of the -o
// json array: as it is when the server prefixed its lines (json_prefix),
// re-indented when it did not (a server that predates json_prefix).
func appendElement(dst, js []byte) []byte {
	// The second line of an object holds a key one indent deep: prefix,
	// two spaces, then a quote.
	if i := bytes.IndexByte(js, '\n'); i < 0 || bytes.HasPrefix(js[i+1:], []byte(elementPrefix+"  ")) {
		return append(dst, js...)
	}
	return appendIndented(dst, js, elementPrefix)
}

// applyPatch makes the admitted resource of a decision that mutated it
// (--server: the patch applied to the resource's JSON).
func (oc *outcome) applyPatch() {
	if p := oc.decision.GetPatch(); len(p) > 0 && oc.mutated == nil && oc.object != nil {
		oc.mutated, _ = applyJSONPatch(oc.object, p)
	}
	oc.object = nil
}

// applyJSONPatch applies an RFC 6902 patch (the server's) to a JSON object
// with the engine's patch code (the server made the patch with it).
func applyJSONPatch(object, p []byte) (map[string]any, error) {
	// The patch decoded as the engine decodes objects (integers as int64).
	wrapped, err := manifest.DecodeJSON(append(append([]byte(`{"p":`), p...), '}'))
	if err != nil {
		return nil, fmt.Errorf("patch: %w", err)
	}
	raw, ok := wrapped["p"].([]any)
	if !ok {
		return nil, errors.New("patch: not an array")
	}
	obj, err := manifest.DecodeJSON(object)
	if err != nil {
		return nil, err
	}
	ops := make([]patch.Op, len(raw))
	for i, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("patch[%d]: not an object", i)
		}
		op := patch.Op{Value: patch.NoValue{}}
		for _, f := range []struct {
			name string
			to   *string
		}{{"op", &op.Op}, {"path", &op.Path}, {"from", &op.From}} {
			if v, ok := m[f.name]; ok && v != nil {
				if *f.to, ok = v.(string); !ok {
					return nil, fmt.Errorf("patch[%d].%s: not a string", i, f.name)
				}
			}
		}
		if v, ok := m["value"]; ok {
			op.Value = v
		}
		ops[i] = op
	}
	return patch.ApplyJSONPatch(obj, ops)
}

// appendAdmitted appends the admitted resource of a mutated outcome, then
// the objects the GeneratingPolicies would create from it, as elements of
// the -o json array, before its report.
func (oc *outcome) appendAdmitted(buf []byte) []byte {
	for _, g := range oc.generated {
		if out, err := jsonenc.AppendIndent(buf, g, "  ", "  "); err == nil {
			buf = append(out, ",\n  "...)
		}
	}
	oc.generated = nil
	if oc.mutated == nil {
		return buf
	}
	out, err := jsonenc.AppendIndent(buf, oc.mutated, "  ", "  ")
	oc.mutated = nil
	if err != nil {
		return buf
	}
	return append(out, ",\n  "...)
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
		case results.Fail, results.Error:
			oc.anyFail = true
		case results.Warn:
			oc.anyWarn = true
		}
	}
	oc.applyPatch()
	if format == formatWhatIf {
		oc.mutated = nil
		if !oc.changed {
			oc.decision, oc.candidate = nil, nil
		}
		return nil
	}
	gvk := schema.FromAPIVersionAndKind(oc.apiVersion, oc.kind)
	rep := report.New(oc.apiVersion, oc.kind, oc.namespace, oc.name,
		admission.IsNamespaced(gvk.GroupKind()), convert.ReportResults(oc.decision.GetResults()))
	if format == "table" {
		// The table says which policies mutated the resource.
		for i, r := range oc.decision.GetResults() {
			if r.GetMutated() {
				rep.Results[i].Message = "mutated"
			}
		}
	}
	oc.decision, oc.candidate = nil, nil
	if format == "json" {
		return rep.AppendJSONCached(oc.appendAdmitted(buf), "  ", cache)
	}
	if oc.mutated != nil && format == "yaml" {
		oc.admitted, _ = jsonenc.AppendValue(nil, oc.mutated)
	}
	if format == "yaml" {
		for _, g := range oc.generated {
			if js, err := jsonenc.AppendValue(nil, g); err == nil {
				oc.generatedJSON = append(oc.generatedJSON, js)
			}
		}
	}
	oc.mutated, oc.generated = nil, nil
	oc.report = rep
	return nil
}

// Run runs apply with o, writing its output to out; ErrFailed when the
// run fails by its exit rule.
func Run(ctx context.Context, out io.Writer, o Options) error {
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if len(o.Paths) == 0 && len(o.Resources) == 0 {
		return fmt.Errorf("no paths given (see arbiter apply -h)")
	}
	switch o.Output {
	case "table", "json", "yaml", "junit":
	default:
		return fmt.Errorf("-o: unknown output %q (table, json, yaml, junit)", o.Output)
	}
	switch o.FailOn {
	case "", "fail", "warn":
	default:
		return fmt.Errorf("--fail-on: unknown severity %q (fail, warn)", o.FailOn)
	}
	if len(o.Candidates) > 0 && o.Server == "" {
		return fmt.Errorf("--candidate needs --server (locally, add the objects to the paths)")
	}
	dflt := admission.ModeCLI
	if o.Server != "" {
		dflt = admission.ModeAdmission
	}
	mode, err := ParseMode(o.Mode, dflt)
	if err != nil {
		return err
	}
	var outcomes []outcome
	var whatIf *arbiterv1.WhatIfSummary
	var prog *progress
	// With -o json the reports are written as they are made (on an error
	// after the first, the output is cut short: exit status 2 says so).
	fin := newFinisher(out, o.Output)
	var start time.Time
	if o.Server != "" {
		if !o.Context.Empty() {
			return errors.New("with --server the context is the server's (store context objects beside the policies: arbiter push): drop --context and --cluster")
		}
		read, err := loadInputs(o.Paths, o.Resources, o.Exceptions)
		if err != nil {
			return err
		}
		in, err := remoteInputsOf(read, o.Operation, mode)
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
		candidates, err := ReadObjects(o.Candidates...)
		if err != nil {
			return err
		}
		if len(candidates) > 0 {
			fin = newFinisher(out, formatWhatIf)
		}
		prog = newProgress(o.Progress, len(in.resources), o.Stderr)
		start = time.Now()
		// decideRemote consumes in.
		outcomes, whatIf, err = decideRemote(ctx, o.Server, o.ClientOptions, in, candidates, prog, fin)
		if err != nil {
			return err
		}
	} else {
		in, err := loadInputs(o.Paths, o.Resources, o.Exceptions)
		if err != nil {
			return err
		}
		if _, err := RequestFor(&manifest.Object{}, o.Operation, mode); err != nil {
			return err // an unknown --operation
		}
		// Mutate-existing and generating policies are evaluated offline.
		ps, err := Compile(in.objects, engine.Options{MutateExisting: true, Generating: true}, o.Stderr)
		if err != nil {
			return err
		}
		libs, err := LoadContext(ctx, o.Context, in.objects)
		if err != nil {
			return err
		}
		prog = newProgress(o.Progress, len(in.resources), o.Stderr)
		start = time.Now()
		if outcomes, err = decideLocal(ctx, ps, libs, in.resources, o.Operation, mode, o.ImageVerifier, prog, fin); err != nil {
			return err
		}
	}
	prog.done(time.Since(start))
	if whatIf != nil {
		if err := writeWhatIf(out, o.Output, outcomes, whatIf); err != nil {
			return err
		}
		if whatIf.GetNewlyDenied() > 0 {
			return ErrFailed
		}
		return nil
	}
	if fin.json != nil {
		if err := fin.json.close(); err != nil {
			return err
		}
	} else {
		reports := make([]report.Report, len(outcomes))
		admitted := make([][]byte, len(outcomes))
		generated := make([][][]byte, len(outcomes))
		for i := range outcomes {
			reports[i], admitted[i], generated[i] = outcomes[i].report, outcomes[i].admitted, outcomes[i].generatedJSON
		}
		if err := writeReports(out, o.Output, reports, admitted, generated); err != nil {
			return err
		}
	}
	if failed(outcomes, o.FailOn) {
		return ErrFailed
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

// generatedNames names generated objects for the table: kind and
// namespace/name, comma-separated.
func generatedNames(objs []map[string]any) string {
	names := make([]string, len(objs))
	for i, o := range objs {
		kind, _ := o["kind"].(string)
		md, _ := o["metadata"].(map[string]any)
		name, _ := md["name"].(string)
		ns, _ := md["namespace"].(string)
		names[i] = resourceName(kind, ns, name)
	}
	return strings.Join(names, ", ")
}

// decideLocal evaluates every resource on the compiled set, in parallel,
// decoding each as it goes.
func decideLocal(ctx context.Context, ps *engine.PolicySet, libs *clusterdata.Context, resources []resourceDoc, operation string, mode admission.Mode, iv kyvernocel.ImageVerifier, prog *progress, fin *finisher) ([]outcome, error) {
	outcomes := make([]outcome, len(resources))
	err := parallel.Try(len(resources), func(i int) error {
		res, sizes, err := resources[i].decoded()
		if err != nil {
			return err
		}
		req, err := RequestFor(res, operation, mode)
		if err != nil {
			return err
		}
		outcomes[i] = newOutcome(res, req.Namespace)
		d := ps.Evaluate(ctx, req, &engine.EvalOptions{ObjectSizes: sizes, Context: libs, ImageVerifier: iv})
		if fin.format == "json" || fin.format == "yaml" {
			outcomes[i].mutated = d.Mutated
		}
		// The GeneratingPolicies' results follow the admission results;
		// what they generate is shown (-o json, yaml) or named (table).
		if ps.HasGenerating() {
			for _, g := range ps.Generate(ctx, req, &engine.EvalOptions{Context: libs, ImageVerifier: iv}) {
				r := g.Result
				switch fin.format {
				case "json", "yaml":
					outcomes[i].generated = append(outcomes[i].generated, g.Generated...)
				case "table":
					if len(g.Generated) > 0 {
						r.Message = "generated " + generatedNames(g.Generated)
					}
				}
				d.Results = append(d.Results, r)
			}
		}
		// The mutated resource is at hand: no patch to it is needed.
		d.Mutated = nil
		outcomes[i].decision = convert.ResponseFromDecision(d)
		fin.finish(i, &outcomes[i])
		prog.add(1)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return outcomes, nil
}
