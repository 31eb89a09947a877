package kyvernotest

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// RenderOptions tune the text rendering of a suite.
type RenderOptions struct {
	// Detailed adds the MESSAGE column.
	Detailed bool
	// FailOnly shows failing rows only.
	FailOnly bool
}

// pluralize renders "1 policy", "2 policies".
func pluralize(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Title is the heading of a suite: `Test NAME (FILE)`.
func (r *SuiteResult) Title() string {
	name := r.Name
	if name == "" {
		name = fmt.Sprintf("#%d", r.Index)
	}
	return fmt.Sprintf("Test %s (%s)", name, r.File)
}

// RenderText writes a suite as `kyverno test` does: a heading, the result
// table (ID, POLICY, RULE, RESOURCE, RESULT, REASON) and the suite's
// "Test Summary" line. A suite that could not be loaded is not rendered
// here (its error goes to the error stream).
func RenderText(w io.Writer, r *SuiteResult, o RenderOptions) {
	if r.err != nil {
		return
	}
	_, _ = fmt.Fprintf(w, "%s: %s, %s, %s\n", r.Title(),
		pluralize(r.Policies, "policy", "policies"),
		pluralize(r.Resources, "resource", "resources"),
		pluralize(r.Exceptions, "exception", "exceptions"))
	for _, warn := range r.Warnings {
		_, _ = fmt.Fprintf(w, "  warning: %s\n", warn)
	}
	if len(r.Rows) == 0 {
		_, _ = fmt.Fprintln(w, "  no results to check")
	} else {
		header := []string{"ID", "POLICY", "RULE", "RESOURCE", "RESULT", "REASON"}
		if o.Detailed {
			header = append(header, "MESSAGE")
		}
		var rows [][]string
		for _, row := range r.Rows {
			if o.FailOnly && !row.Failure {
				continue
			}
			cells := []string{fmt.Sprint(row.ID), row.Policy, row.Rule, row.Resource, row.Result, row.Reason}
			if o.Detailed {
				cells = append(cells, oneLine(row.Message))
			}
			rows = append(rows, cells)
		}
		if len(rows) > 0 {
			writeTable(w, header, rows)
		}
	}
	_, _ = fmt.Fprintf(w, "Test Summary: %d tests passed and %d tests failed\n\n", r.Passed, r.Failed)
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// writeTable draws a box table.
func writeTable(w io.Writer, header []string, rows [][]string) {
	widths := make([]int, len(header))
	for i, h := range header {
		widths[i] = utf8.RuneCountInString(h)
	}
	for _, row := range rows {
		for i, c := range row {
			if n := utf8.RuneCountInString(c); n > widths[i] {
				widths[i] = n
			}
		}
	}
	line := func(left, mid, right string) {
		var b strings.Builder
		b.WriteString(left)
		for i, wd := range widths {
			if i > 0 {
				b.WriteString(mid)
			}
			b.WriteString(strings.Repeat("─", wd+2))
		}
		b.WriteString(right)
		_, _ = fmt.Fprintln(w, b.String())
	}
	cells := func(cs []string) {
		var b strings.Builder
		b.WriteString("│")
		for i, c := range cs {
			b.WriteString(" ")
			b.WriteString(c)
			b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)))
			b.WriteString(" │")
		}
		_, _ = fmt.Fprintln(w, b.String())
	}
	line("┌", "┬", "┐")
	cells(header)
	line("├", "┼", "┤")
	for _, row := range rows {
		cells(row)
	}
	line("└", "┴", "┘")
}

// RenderSummary writes the closing line: `N passed, M failed`.
func RenderSummary(w io.Writer, s Summary) {
	_, _ = fmt.Fprintf(w, "%d passed, %d failed\n", s.Passed, s.Failed)
}

// JSONReport is the machine-readable output of a run.
type JSONReport struct {
	Suites []*SuiteResult `json:"suites"`
	Summary
}

// RenderJSON writes the whole run as JSON.
func RenderJSON(w io.Writer, results []*SuiteResult) error {
	if results == nil {
		results = []*SuiteResult{}
	}
	for _, r := range results {
		if r.Rows == nil {
			r.Rows = []Row{}
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(JSONReport{Suites: results, Summary: Summarize(results)})
}
