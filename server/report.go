package server

import (
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/report"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// reportOf is the PolicyReport of a decision for the request's object, as
// `arbiter apply` writes it (from the decision's results as
// ResponseFromDecision gives them and ReportResults converts them).
func reportOf(req *admission.Request, d *engine.Decision) report.Report {
	results := make([]report.Result, len(d.Results))
	for i := range d.Results {
		r := &d.Results[i]
		results[i] = report.Result{Policy: r.Policy, Rule: r.Rule, Result: r.Result, Message: r.Message, Properties: r.Properties,
			Source: r.Source, Scored: r.Scored, Category: r.Category, Severity: r.Severity}
	}
	return report.New(req.Kind.GroupVersion().String(), req.Kind.Kind, req.Namespace, req.Name,
		admission.IsNamespaced(req.Kind.GroupKind()), results)
}

// ReportResults converts decision results to PolicyReport results.
func ReportResults(rs []*arbiterv1.PolicyResult) []report.Result {
	out := make([]report.Result, len(rs))
	for i, r := range rs {
		out[i] = report.Result{
			Policy:     r.GetPolicy(),
			Rule:       r.GetRule(),
			Result:     r.GetResult(),
			Message:    r.GetMessage(),
			Properties: r.GetProperties(),
			Source:     r.GetSource(),
			Scored:     r.GetScored(),
			Category:   r.GetCategory(),
			Severity:   r.GetSeverity(),
		}
	}
	return out
}
