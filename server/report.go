package server

import (
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/report"
)

// reportOf is the PolicyReport of a decision for the request's object, as
// `arbiter apply` writes it (from the decision's results as
// convert.ResponseFromDecision gives them and convert.ReportResults converts them).
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
