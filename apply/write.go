package apply

import (
	"bufio"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"

	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/engine/report"
	"github.com/arbiter-pdp/arbiter/internal/textout"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/whatif"
)

// writeReports writes the reports (-o table, yaml, junit); with -o yaml,
// the resource as it would be admitted (admitted[i], JSON) comes before
// the report of each resource the mutations changed, and the objects the
// GeneratingPolicies would create from it (generated[i], JSON) before that.
func writeReports(out io.Writer, format string, reports []report.Report, admitted [][]byte, generated [][][]byte) error {
	switch format {
	case "yaml":
		w := textout.New(out)
		for i, r := range reports {
			if i > 0 {
				w.Println("---")
			}
			if i < len(generated) {
				for _, g := range generated[i] {
					b, err := yaml.JSONToYAML(g)
					if err != nil {
						return err
					}
					if _, err := w.Write(b); err != nil {
						return err
					}
					w.Println("---")
				}
			}
			if i < len(admitted) && admitted[i] != nil {
				b, err := yaml.JSONToYAML(admitted[i])
				if err != nil {
					return err
				}
				if _, err := w.Write(b); err != nil {
					return err
				}
				w.Println("---")
			}
			b, err := yaml.Marshal(r)
			if err != nil {
				return err
			}
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
		return w.Err()
	case "junit":
		return writeJUnit(out, reports)
	}
	tw := textout.New(tabwriter.NewWriter(out, 0, 4, 2, ' ', 0))
	tw.Println("RESOURCE\tPOLICY\tRESULT\tMESSAGE")
	var total report.Summary
	for _, r := range reports {
		name := resourceName(r.Scope.Kind, r.Scope.Namespace, r.Scope.Name)
		if len(r.Results) == 0 {
			tw.Printf("%s\t-\t-\tno policy applies\n", name)
		}
		for _, res := range r.Results {
			policy := res.Policy
			if res.Rule != "" {
				policy += "/" + res.Rule
			}
			tw.Printf("%s\t%s\t%s\t%s\n", name, policy, res.Result, OneLine(res.Message))
			total.Add(res.Result)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	w := textout.New(out)
	w.Printf("\n%d resources: %d pass, %d fail, %d warn, %d error, %d skip\n",
		len(reports), total.Pass, total.Fail, total.Warn, total.Error, total.Skip)
	return w.Err()
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
		head := ",\n  "
		if a.next == 0 {
			head = "[\n  "
		}
		if _, err := a.w.WriteString(head); err != nil && a.err == nil {
			a.err = err
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
	end := "\n]\n"
	if a.next == 0 {
		end = "[]\n"
	}
	if _, err := a.w.WriteString(end); err != nil && a.err == nil {
		a.err = err
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
			msg := &junitMessage{Message: OneLine(res.Message), Body: res.Message}
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
	if _, err := io.WriteString(out, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(out)
	enc.Indent("", "  ")
	if err := enc.Encode(all); err != nil {
		return err
	}
	_, err := io.WriteString(out, "\n")
	return err
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
	w := textout.New(out)
	for _, it := range doc.Items {
		verdict := func(a bool) string {
			if a {
				return "allowed"
			}
			return "denied"
		}
		w.Printf("%s: %s now, %s with the candidates\n", it.Resource, verdict(it.AllowedNow), verdict(it.AllowedThen))
		for _, c := range it.Changes {
			w.Printf("  %s\n", c)
		}
	}
	w.Printf("\n%s (%d resources)\n", doc.Summary, len(outcomes))
	return w.Err()
}

// diffLines says per policy how a result changes.
func diffLines(now, then *arbiterv1.DecideResponse) []string {
	var out []string
	for _, c := range whatif.Diff(now, then) {
		switch {
		case c.Before == nil:
			out = append(out, fmt.Sprintf("%s: (none) -> %s %s", c.Policy, c.After.GetResult(), OneLine(c.After.GetMessage())))
		case c.After == nil:
			out = append(out, fmt.Sprintf("%s: %s -> (none)", c.Policy, c.Before.GetResult()))
		default:
			out = append(out, fmt.Sprintf("%s: %s -> %s %s", c.Policy, c.Before.GetResult(), c.After.GetResult(), OneLine(c.After.GetMessage())))
		}
	}
	return out
}

// OneLine is s on one line of at most 160 characters, for tables.
func OneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}
