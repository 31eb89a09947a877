// Package report renders decisions as wgpolicyk8s.io/v1alpha2 PolicyReport
// and ClusterPolicyReport objects, one per resource, as Kyverno writes them.
package report

import (
	"sort"
	"strings"
)

// APIVersion of the reports.
const APIVersion = "wgpolicyk8s.io/v1alpha2"

// Report is a PolicyReport or ClusterPolicyReport.
type Report struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Metadata   Metadata `json:"metadata"`
	Scope      *Scope   `json:"scope,omitempty"`
	Results    []Result `json:"results"`
	Summary    Summary  `json:"summary"`
}

// Metadata is the report's object metadata.
type Metadata struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// Scope names the resource a report is about.
type Scope struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	Namespace  string `json:"namespace,omitempty"`
}

// Result is one policy result.
type Result struct {
	Policy     string            `json:"policy"`
	Rule       string            `json:"rule"`
	Result     string            `json:"result"`
	Message    string            `json:"message,omitempty"`
	Properties map[string]string `json:"properties,omitempty"`
	Source     string            `json:"source,omitempty"`
	Scored     bool              `json:"scored"`
	Category   string            `json:"category,omitempty"`
	Severity   string            `json:"severity,omitempty"`
}

// Summary counts results by outcome.
type Summary struct {
	Pass  int `json:"pass"`
	Fail  int `json:"fail"`
	Warn  int `json:"warn"`
	Error int `json:"error"`
	Skip  int `json:"skip"`
}

// Add counts one result.
func (s *Summary) Add(result string) {
	switch result {
	case "pass":
		s.Pass++
	case "fail":
		s.Fail++
	case "warn":
		s.Warn++
	case "error":
		s.Error++
	case "skip":
		s.Skip++
	}
}

// Total is the number of results counted.
func (s Summary) Total() int { return s.Pass + s.Fail + s.Warn + s.Error + s.Skip }

// New builds the report of one resource. namespaced says whether the
// resource lives in a namespace (PolicyReport) or not (ClusterPolicyReport).
func New(apiVersion, kind, namespace, name string, namespaced bool, results []Result) Report {
	r := Report{
		APIVersion: APIVersion,
		Kind:       "ClusterPolicyReport",
		Metadata: Metadata{
			Name:   reportName(kind, name),
			Labels: map[string]string{"app.kubernetes.io/managed-by": "arbiter"},
		},
		Scope:   &Scope{APIVersion: apiVersion, Kind: kind, Name: name},
		Results: results,
	}
	if r.Results == nil {
		r.Results = []Result{}
	}
	if namespaced {
		r.Kind = "PolicyReport"
		r.Metadata.Namespace = namespace
		r.Scope.Namespace = namespace
	}
	for _, res := range results {
		r.Summary.Add(res.Result)
	}
	return r
}

func reportName(kind, name string) string {
	return strings.ToLower(kind) + "-" + name
}

// SortResults orders results by policy, then rule.
func SortResults(rs []Result) {
	sort.SliceStable(rs, func(i, j int) bool {
		if rs[i].Policy != rs[j].Policy {
			return rs[i].Policy < rs[j].Policy
		}
		return rs[i].Rule < rs[j].Rule
	})
}
