package server

import (
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/report"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// ReportOf is the PolicyReport of a decision's results for the request's
// object, as `arbiter apply` writes it.
func ReportOf(req *engine.Request, results []*arbiterv1.PolicyResult) report.Report {
	return report.New(req.Kind.GroupVersion().String(), req.Kind.Kind, req.Namespace, req.Name,
		engine.IsNamespaced(req.Kind.GroupKind()), ReportResults(results))
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
