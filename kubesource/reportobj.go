package kubesource

import (
	"encoding/json"
	"sort"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

// The reports' metadata, as Kyverno's reports controller writes it: the
// one label (report consumers, Policy Reporter among them, select on it),
// and Arbiter's annotation naming the revision of the scan that last
// changed the report.
const (
	ManagedByReportLabel = "app.kubernetes.io/managed-by"
	ManagedByReportValue = "kyverno"
	RevisionAnnotation   = "reports.arbiter.dev/revision"
)

// buildReport is the report of an object: a PolicyReport (a
// ClusterPolicyReport for a cluster-scoped object) named by the object's
// UID, owned by it, with the results sorted and counted.
func buildReport(u *unstructured.Unstructured, namespaced bool, results []outcome.Result, rev uint64, now time.Time) *unstructured.Unstructured {
	owner := map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(), "name": u.GetName(), "uid": string(u.GetUID())}
	scope := map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(), "name": u.GetName(), "uid": string(u.GetUID())}
	md := map[string]any{
		"name":            string(u.GetUID()),
		"labels":          map[string]any{ManagedByReportLabel: ManagedByReportValue},
		"annotations":     map[string]any{RevisionAnnotation: strconv.FormatUint(rev, 10)},
		"ownerReferences": []any{owner},
	}
	kind := "ClusterPolicyReport"
	if namespaced {
		kind = "PolicyReport"
		md["namespace"] = u.GetNamespace()
		scope["namespace"] = u.GetNamespace()
	}
	rs := make([]map[string]any, len(results))
	var pass, fail, warn, errs, skip int64
	for i := range results {
		r := &results[i]
		rs[i] = reportResult(r, now.Unix())
		switch r.Result {
		case outcome.Pass:
			pass++
		case outcome.Fail:
			fail++
		case outcome.Warn:
			warn++
		case outcome.Error:
			errs++
		case outcome.Skip:
			skip++
		}
	}
	sortResults(rs)
	list := make([]any, len(rs))
	for i, r := range rs {
		list[i] = r
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "wgpolicyk8s.io/v1alpha2",
		"kind":       kind,
		"metadata":   md,
		"scope":      scope,
		"results":    list,
		"summary":    map[string]any{"pass": pass, "fail": fail, "warn": warn, "error": errs, "skip": skip},
	}}
}

// reportResult is a PolicyReportResult as Kyverno writes it (JSON
// omitempty fields left out).
func reportResult(r *outcome.Result, seconds int64) map[string]any {
	m := map[string]any{
		"policy":    r.Policy,
		"result":    r.Result,
		"source":    r.Source,
		"timestamp": map[string]any{"seconds": seconds, "nanos": int64(0)},
	}
	if r.Rule != "" {
		m["rule"] = r.Rule
	}
	if r.Message != "" {
		m["message"] = r.Message
	}
	if r.Scored {
		m["scored"] = true
	}
	if r.Category != "" {
		m["category"] = r.Category
	}
	if r.Severity != "" {
		m["severity"] = r.Severity
	}
	if len(r.Properties) > 0 {
		props := make(map[string]any, len(r.Properties))
		for k, v := range r.Properties {
			props[k] = v
		}
		m["properties"] = props
	}
	return m
}

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

// sortResults orders results as Kyverno's SetResults does: by policy,
// rule, source, then (Arbiter's tie-breakers) result and message.
func sortResults(rs []map[string]any) {
	sort.SliceStable(rs, func(i, j int) bool {
		for _, k := range []string{"policy", "rule", "source", "result", "message"} {
			if a, b := str(rs[i], k), str(rs[j], k); a != b {
				return a < b
			}
		}
		return false
	})
}

// canonical is what decides whether a report changed: its kind, name,
// namespace, label, owner, scope, summary and results without their
// timestamps (not the revision annotation).
func canonical(u *unstructured.Unstructured) string {
	results, _ := u.Object["results"].([]any)
	rs := make([]any, len(results))
	for i, r := range results {
		rm, _ := r.(map[string]any)
		c := make(map[string]any, len(rm))
		for k, v := range rm {
			if k != "timestamp" {
				c[k] = v
			}
		}
		rs[i] = c
	}
	var owners []any
	for _, o := range u.GetOwnerReferences() {
		owners = append(owners, map[string]any{"apiVersion": o.APIVersion, "kind": o.Kind, "name": o.Name, "uid": string(o.UID)})
	}
	b, _ := json.Marshal([]any{u.GetKind(), u.GetNamespace(), u.GetName(), u.GetLabels()[ManagedByReportLabel], owners,
		u.Object["scope"], u.Object["summary"], rs})
	return string(b)
}

// updateOf is cur made into want: want's content and metadata, on cur's
// object (its resourceVersion and other metadata), with the timestamps of
// the results that did not change.
func updateOf(cur, want *unstructured.Unstructured) *unstructured.Unstructured {
	out := cur.DeepCopy()
	stamps := map[string]any{}
	old, _ := cur.Object["results"].([]any)
	for _, r := range old {
		rm, _ := r.(map[string]any)
		if ts, ok := rm["timestamp"]; ok {
			stamps[resultKey(rm)] = ts
		}
	}
	results, _ := want.Object["results"].([]any)
	rs := make([]any, len(results))
	for i, r := range results {
		rm, _ := r.(map[string]any)
		c := make(map[string]any, len(rm))
		for k, v := range rm {
			c[k] = v
		}
		if ts, ok := stamps[resultKey(rm)]; ok {
			c["timestamp"] = ts
		}
		rs[i] = c
	}
	out.Object["results"] = rs
	out.Object["scope"] = want.Object["scope"]
	out.Object["summary"] = want.Object["summary"]
	labels := out.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[ManagedByReportLabel] = ManagedByReportValue
	out.SetLabels(labels)
	ann := out.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[RevisionAnnotation] = want.GetAnnotations()[RevisionAnnotation]
	out.SetAnnotations(ann)
	out.SetOwnerReferences(want.GetOwnerReferences())
	return out
}

// resultKey identifies a result without its timestamp.
func resultKey(r map[string]any) string {
	c := make(map[string]any, len(r))
	for k, v := range r {
		if k != "timestamp" {
			c[k] = v
		}
	}
	b, _ := json.Marshal(c)
	return string(b)
}
