package kubesource

import (
	"maps"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

func reportPod(namespace string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod"}}
	u.SetName("web")
	u.SetNamespace(namespace)
	u.SetUID("0b5e")
	return u
}

// buildReport: Kyverno's layout (name = UID, the one label, owner, scope,
// sorted results, summary); canonical ignores the timestamps and the
// revision; reportBody keeps an unchanged result's timestamp and the
// stored object's metadata, without its managedFields.
func TestBuildReport(t *testing.T) {
	rs := []outcome.Result{
		{Policy: "b", Result: outcome.Fail, Message: "no", Source: outcome.SourceValidatingPolicy, Scored: true, Properties: map[string]string{"process": "background scan", "cel.validationIndex": "0"}},
		{Policy: "a", Rule: "exception", Result: outcome.Skip, Message: "rule is skipped due to policy exception: ns/ex", Source: outcome.SourceValidatingPolicy, Category: "Pod Security", Severity: "high"},
	}
	t0 := time.Unix(1700000000, 0)
	r := buildReport(reportPod("ns"), true, rs, 7, t0)
	want := `{"apiVersion":"wgpolicyk8s.io/v1alpha2","kind":"PolicyReport","metadata":{"annotations":{"reports.arbiter.dev/revision":"7"},"labels":{"app.kubernetes.io/managed-by":"kyverno"},"name":"0b5e","namespace":"ns","ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"web","uid":"0b5e"}]},"results":[{"category":"Pod Security","message":"rule is skipped due to policy exception: ns/ex","policy":"a","result":"skip","rule":"exception","severity":"high","source":"KyvernoValidatingPolicy","timestamp":{"nanos":0,"seconds":1700000000}},{"message":"no","policy":"b","properties":{"cel.validationIndex":"0","process":"background scan"},"result":"fail","scored":true,"source":"KyvernoValidatingPolicy","timestamp":{"nanos":0,"seconds":1700000000}}],"scope":{"apiVersion":"v1","kind":"Pod","name":"web","namespace":"ns","uid":"0b5e"},"summary":{"error":0,"fail":1,"pass":0,"skip":1,"warn":0}}`
	if got := mustJSON(r.Object); got != want {
		t.Errorf("report\n got %s\nwant %s", got, want)
	}
	c := buildReport(reportPod(""), false, rs[:1], 7, t0)
	if c.GetKind() != "ClusterPolicyReport" || c.GetNamespace() != "" || c.Object["scope"].(map[string]any)["namespace"] != nil {
		t.Errorf("cluster report %s", mustJSON(c.Object))
	}

	later := buildReport(reportPod("ns"), true, rs, 9, t0.Add(time.Hour))
	if canonical(later) != canonical(r) {
		t.Error("timestamps or the revision make a report differ")
	}
	rs2 := append([]outcome.Result(nil), rs...)
	rs2[0].Message = "never"
	changed := buildReport(reportPod("ns"), true, rs2, 9, t0.Add(time.Hour))
	if canonical(changed) == canonical(r) {
		t.Fatal("a changed message leaves the report the same")
	}
	// The stored report as read back from the API server.
	stored := &unstructured.Unstructured{}
	if err := stored.UnmarshalJSON([]byte(mustJSON(r.Object))); err != nil {
		t.Fatal(err)
	}
	base := metav1.ObjectMeta{Name: "0b5e", Namespace: "ns", ResourceVersion: "42", Labels: map[string]string{"team": "a"},
		Annotations: map[string]string{"note": "kept", RevisionAnnotation: "7"}, Finalizers: []string{"example.com/keep"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "arbiter", Operation: metav1.ManagedFieldsOperationUpdate}}}
	results, _ := stored.Object["results"].([]any)
	digest := digestOf(canonical(changed))
	body, stamps, err := reportBody(base, changed, stampsOf(results), digest)
	if err != nil {
		t.Fatal(err)
	}
	up := &unstructured.Unstructured{}
	if err := up.UnmarshalJSON(body); err != nil {
		t.Fatal(err)
	}
	if up.GetResourceVersion() != "42" || up.GetAnnotations()[RevisionAnnotation] != "9" || up.GetAnnotations()[DigestAnnotation] != digest ||
		up.GetAnnotations()["note"] != "kept" || up.GetLabels()["team"] != "a" || up.GetLabels()[ManagedByReportLabel] != ManagedByReportValue ||
		len(up.GetFinalizers()) != 1 || up.GetManagedFields() != nil || canonical(up) != canonical(changed) {
		t.Errorf("update %s", body)
	}
	if len(digest) != 32 || digestOf(canonical(r)) == digest {
		t.Errorf("digest %q", digest)
	}
	res := up.Object["results"].([]any)
	if ts := res[0].(map[string]any)["timestamp"].(map[string]any)["seconds"]; ts != int64(1700000000) {
		t.Errorf("the unchanged result's timestamp: %v", ts)
	}
	if ts := res[1].(map[string]any)["timestamp"].(map[string]any)["seconds"]; ts != int64(1700003600) {
		t.Errorf("the changed result's timestamp: %v", ts)
	}
	if len(stamps) != 2 || stamps[0].key != stampsOf(results)[0].key || stamps[1].key == stampsOf(results)[1].key {
		t.Errorf("stamps %v", stamps)
	}

	// A new report: only its name and namespace, no resourceVersion.
	body, _, err = reportBody(metav1.ObjectMeta{Name: "0b5e", Namespace: "ns"}, r, nil, digestOf(canonical(r)))
	if err != nil {
		t.Fatal(err)
	}
	created := &unstructured.Unstructured{}
	if err := created.UnmarshalJSON(body); err != nil {
		t.Fatal(err)
	}
	if created.GetAnnotations()[DigestAnnotation] != digestOf(canonical(r)) || created.GetResourceVersion() != "" {
		t.Errorf("created %s", body)
	}
	created.SetAnnotations(r.GetAnnotations())
	if got, want := mustJSON(created.Object), mustJSON(r.Object); got != want {
		t.Errorf("created\n got %s\nwant %s", got, want)
	}
}

// resultKey tells results apart by every field but the timestamp.
func TestResultKey(t *testing.T) {
	a := map[string]any{"policy": "p", "result": "fail", "scored": true, "properties": map[string]any{"process": "background scan", "x": "1"},
		"timestamp": map[string]any{"seconds": int64(1)}}
	b := maps.Clone(a)
	b["timestamp"] = map[string]any{"seconds": int64(2)}
	if resultKey(a) != resultKey(b) {
		t.Error("the timestamp counts")
	}
	for k, v := range map[string]any{"policy": "q", "scored": false, "properties": map[string]any{"process": "background scan", "x": "2"}, "message": "m"} {
		c := maps.Clone(a)
		c[k] = v
		if resultKey(c) == resultKey(a) {
			t.Errorf("%s does not count", k)
		}
	}
}
