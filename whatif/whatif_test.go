package whatif

import (
	"reflect"
	"testing"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

func decision(allowed bool, warnings []string, results ...*arbiterv1.PolicyResult) *arbiterv1.DecideResponse {
	return &arbiterv1.DecideResponse{Allowed: allowed, Warnings: warnings, Results: results}
}

func result(policy, rule, res, msg string) *arbiterv1.PolicyResult {
	return &arbiterv1.PolicyResult{Policy: policy, Rule: rule, Result: res, Message: msg}
}

func TestChanged(t *testing.T) {
	pass := result("p", "", "pass", "")
	fail := result("p", "", "fail", "no")
	for name, tc := range map[string]struct {
		now, then *arbiterv1.DecideResponse
		want      bool
	}{
		"same":           {decision(true, nil, pass), decision(true, nil, pass), false},
		"verdict":        {decision(true, nil, pass), decision(false, nil, pass), true},
		"result":         {decision(true, nil, pass), decision(true, nil, fail), true},
		"rule":           {decision(true, nil, pass), decision(true, nil, result("p", "r", "pass", "")), true},
		"one more":       {decision(true, nil, pass), decision(true, nil, pass, fail), true},
		"warnings":       {decision(true, nil, pass), decision(true, []string{"w"}, pass), true},
		"no results nil": {decision(true, nil), decision(true, []string{}), false},
	} {
		if got := Changed(tc.now, tc.then); got != tc.want {
			t.Errorf("%s: Changed = %v, want %v", name, got, tc.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	item := func(now, then, changed bool) *arbiterv1.ItemResult {
		return &arbiterv1.ItemResult{Decision: decision(now, nil), CandidateDecision: decision(then, nil), Changed: changed}
	}
	for _, tc := range []struct {
		items []*arbiterv1.ItemResult
		want  string
	}{
		{nil, "no change"},
		{[]*arbiterv1.ItemResult{item(true, false, false), {Decision: decision(true, nil)}}, "no change"},
		{[]*arbiterv1.ItemResult{item(true, false, true)}, "would now deny 1 manifest"},
		{[]*arbiterv1.ItemResult{item(true, false, true), item(true, false, true), item(false, true, true), item(true, true, true)},
			"would now deny 2 manifests; would now allow 1 manifest; would change the results of 1 manifest without changing the verdict"},
	} {
		if got := Summarize(tc.items).GetSummary(); got != tc.want {
			t.Errorf("Summarize: %q, want %q", got, tc.want)
		}
	}
	sum := Summarize([]*arbiterv1.ItemResult{item(true, false, true), item(false, true, true), item(false, false, true)})
	if sum.GetNewlyDenied() != 1 || sum.GetNewlyAllowed() != 1 || sum.GetResultsChanged() != 1 {
		t.Errorf("counts: %v", sum)
	}
}

func TestDiff(t *testing.T) {
	now := decision(true, nil, result("a", "", "pass", ""), result("b", "", "pass", ""), result("gone", "", "warn", "w"))
	then := decision(false, nil, result("new", "", "fail", "x"), result("a", "", "pass", ""), result("b", "", "fail", "bad"))
	got := Diff(now, then)
	want := []ResultChange{
		{Policy: "new", After: then.Results[0]},
		{Policy: "b", Before: now.Results[1], After: then.Results[2]},
		{Policy: "gone", Before: now.Results[2]},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Diff:\n got %v\nwant %v", got, want)
	}
}
