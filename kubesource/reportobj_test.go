package kubesource

import (
	"testing"
	"time"

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
// revision; updateOf keeps an unchanged result's timestamp and the stored
// object's metadata.
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
	stored := r.DeepCopy()
	stored.SetResourceVersion("42")
	up := updateOf(stored, changed)
	if up.GetResourceVersion() != "42" || up.GetAnnotations()[RevisionAnnotation] != "9" || canonical(up) != canonical(changed) {
		t.Errorf("update %s", mustJSON(up.Object))
	}
	res := up.Object["results"].([]any)
	if ts := res[0].(map[string]any)["timestamp"].(map[string]any)["seconds"]; ts != int64(1700000000) {
		t.Errorf("the unchanged result's timestamp: %v", ts)
	}
	if ts := res[1].(map[string]any)["timestamp"].(map[string]any)["seconds"]; ts != int64(1700003600) {
		t.Errorf("the changed result's timestamp: %v", ts)
	}
}
