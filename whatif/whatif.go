// Package whatif compares the decisions made with and without what-if
// candidates (policy objects tried without committing them): whether a
// decision changed, how each policy's result changed, and the summary of a
// batch. The server (DecideBatch, DecideStream) and `arbiter apply
// --candidate` share it; it depends only on the generated API.
package whatif

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// Changed says whether the candidates change a decision: its verdict, its
// results (policy, rule, result and message, in order) or its warnings.
func Changed(now, then *arbiterv1.DecideResponse) bool {
	return now.GetAllowed() != then.GetAllowed() || !sameResults(now, then)
}

func sameResults(a, b *arbiterv1.DecideResponse) bool {
	if len(a.GetResults()) != len(b.GetResults()) {
		return false
	}
	for i := range a.GetResults() {
		x, y := a.GetResults()[i], b.GetResults()[i]
		if x.GetPolicy() != y.GetPolicy() || x.GetRule() != y.GetRule() || x.GetResult() != y.GetResult() || x.GetMessage() != y.GetMessage() {
			return false
		}
	}
	return proto.Equal(&arbiterv1.DecideResponse{Warnings: a.GetWarnings()}, &arbiterv1.DecideResponse{Warnings: b.GetWarnings()})
}

// Summarize counts the items the candidates change: newly denied, newly
// allowed, results changed with the same verdict; with the sentence that
// says so.
func Summarize(items []*arbiterv1.ItemResult) *arbiterv1.WhatIfSummary {
	sum := &arbiterv1.WhatIfSummary{}
	for _, it := range items {
		if it.GetDecision() == nil || it.GetCandidateDecision() == nil || !it.GetChanged() {
			continue
		}
		switch now, then := it.GetDecision().GetAllowed(), it.GetCandidateDecision().GetAllowed(); {
		case now && !then:
			sum.NewlyDenied++
		case !now && then:
			sum.NewlyAllowed++
		default:
			sum.ResultsChanged++
		}
	}
	sum.Summary = sentence(sum)
	return sum
}

// sentence is the summary in words ("would now deny 3 manifests").
func sentence(sum *arbiterv1.WhatIfSummary) string {
	plural := func(n uint32, one, many string) string {
		if n == 1 {
			return fmt.Sprintf("%d %s", n, one)
		}
		return fmt.Sprintf("%d %s", n, many)
	}
	if sum.NewlyDenied == 0 && sum.NewlyAllowed == 0 && sum.ResultsChanged == 0 {
		return "no change"
	}
	var parts []string
	if sum.NewlyDenied > 0 {
		parts = append(parts, "would now deny "+plural(sum.NewlyDenied, "manifest", "manifests"))
	}
	if sum.NewlyAllowed > 0 {
		parts = append(parts, "would now allow "+plural(sum.NewlyAllowed, "manifest", "manifests"))
	}
	if sum.ResultsChanged > 0 {
		parts = append(parts, "would change the results of "+plural(sum.ResultsChanged, "manifest", "manifests")+" without changing the verdict")
	}
	return strings.Join(parts, "; ")
}

// ResultChange is how one policy's result changes: Before or After is
// nil when the policy has no result without or with the candidates.
type ResultChange struct {
	Policy        string
	Before, After *arbiterv1.PolicyResult
}

// Diff lists, per policy, the results the candidates change (result or
// message): first in the order of then, then the policies then no longer
// has a result for.
func Diff(now, then *arbiterv1.DecideResponse) []ResultChange {
	key := func(r *arbiterv1.PolicyResult) string { return r.GetPolicy() }
	before := map[string]*arbiterv1.PolicyResult{}
	for _, r := range now.GetResults() {
		before[key(r)] = r
	}
	var out []ResultChange
	seen := map[string]bool{}
	for _, r := range then.GetResults() {
		seen[key(r)] = true
		b, ok := before[key(r)]
		switch {
		case !ok:
			out = append(out, ResultChange{Policy: r.GetPolicy(), After: r})
		case b.GetResult() != r.GetResult() || b.GetMessage() != r.GetMessage():
			out = append(out, ResultChange{Policy: r.GetPolicy(), Before: b, After: r})
		}
	}
	for _, r := range now.GetResults() {
		if !seen[key(r)] {
			out = append(out, ResultChange{Policy: r.GetPolicy(), Before: r})
		}
	}
	return out
}
