package kubesource

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"maps"
	"sort"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

// The reports' metadata, as Kyverno's reports controller writes it: the
// one label (report consumers, Policy Reporter among them, select on it),
// and Arbiter's annotations naming the revision of the scan that last
// changed the report and the digest of its content.
const (
	ManagedByReportLabel = "app.kubernetes.io/managed-by"
	ManagedByReportValue = "kyverno"
	RevisionAnnotation   = "reports.arbiter.dev/revision"
	// DigestAnnotation is the digest of the report's content as Arbiter
	// wrote it (canonical: results without their timestamps, summary,
	// scope, owner, label): Arbiter watches only the reports' metadata and
	// tells from it whether a report holds what it would write.
	DigestAnnotation = "reports.arbiter.dev/digest"
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

// digestOf is the digest of a report's canonical form, written to its
// DigestAnnotation: 128 bits of SHA-256, in hex.
func digestOf(canon string) string {
	sum := sha256.Sum256([]byte(canon))
	return hex.EncodeToString(sum[:16])
}

// stamp is the timestamp of a result written, by the hash of the result
// without it (resultKey).
type stamp struct {
	key uint64
	ts  any
}

// stampSeed hashes results in memory only (never written).
var stampSeed = maphash.MakeSeed()

// stampsOf are the timestamps of results, by result.
func stampsOf(results []any) []stamp {
	out := make([]stamp, 0, len(results))
	for _, r := range results {
		rm, _ := r.(map[string]any)
		if ts, ok := rm["timestamp"]; ok {
			out = append(out, stamp{key: resultKey(rm), ts: ts})
		}
	}
	return out
}

// reportBody is the report to write: want's content and its label,
// annotations (with digest as DigestAnnotation) and owner, on the
// metadata of base (the stored report's, with its resourceVersion; for a
// new report only its name and namespace). The results that were already
// there (in prev) keep their timestamps. It returns the JSON and the
// timestamps written.
func reportBody(base metav1.ObjectMeta, want *unstructured.Unstructured, prev []stamp, digest string) ([]byte, []stamp, error) {
	md := base
	md.ManagedFields = nil // the API server keeps the stored ones
	md.Labels = maps.Clone(md.Labels)
	if md.Labels == nil {
		md.Labels = map[string]string{}
	}
	md.Labels[ManagedByReportLabel] = ManagedByReportValue
	md.Annotations = maps.Clone(md.Annotations)
	if md.Annotations == nil {
		md.Annotations = map[string]string{}
	}
	md.Annotations[RevisionAnnotation] = want.GetAnnotations()[RevisionAnnotation]
	md.Annotations[DigestAnnotation] = digest
	md.OwnerReferences = want.GetOwnerReferences()
	old := make(map[uint64]any, len(prev))
	for _, st := range prev {
		old[st.key] = st.ts
	}
	results, _ := want.Object["results"].([]any)
	rs := make([]any, len(results))
	stamps := make([]stamp, 0, len(results))
	for i, r := range results {
		rm, _ := r.(map[string]any)
		key := resultKey(rm)
		ts, ok := old[key]
		if !ok {
			ts = rm["timestamp"]
		}
		if ok && len(rm) > 0 {
			c := maps.Clone(rm)
			c["timestamp"] = ts
			rm = c
		}
		rs[i] = rm
		stamps = append(stamps, stamp{key: key, ts: ts})
	}
	b, err := json.Marshal(struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ObjectMeta `json:"metadata"`
		Scope      any               `json:"scope,omitempty"`
		Results    []any             `json:"results"`
		Summary    any               `json:"summary"`
	}{want.GetAPIVersion(), want.GetKind(), md, want.Object["scope"], rs, want.Object["summary"]})
	return b, stamps, err
}

// resultKey identifies a result without its timestamp: the hash of its
// fields, sorted, with their values.
func resultKey(r map[string]any) uint64 {
	var h maphash.Hash
	h.SetSeed(stampSeed)
	hashKeyed(&h, r, "timestamp")
	return h.Sum64()
}

func hashKeyed(h *maphash.Hash, m map[string]any, skip string) {
	var buf [16]string
	keys := buf[:0]
	for k := range m {
		if k != skip {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var n [8]byte
	str := func(s string) {
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		_, _ = h.Write(n[:])
		_, _ = h.WriteString(s)
	}
	_ = h.WriteByte('{')
	for _, k := range keys {
		str(k)
		switch v := m[k].(type) {
		case string:
			_ = h.WriteByte('s')
			str(v)
		case bool:
			_ = h.WriteByte('b')
			if v {
				_ = h.WriteByte(1)
			} else {
				_ = h.WriteByte(0)
			}
		case map[string]any:
			hashKeyed(h, v, "")
		default:
			_ = h.WriteByte('v')
			str(fmt.Sprintf("%T %#v", v, v))
		}
	}
	_ = h.WriteByte('}')
}
