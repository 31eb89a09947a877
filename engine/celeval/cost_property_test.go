package celeval_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/internal/jsonenc"
)

// heavyPolicies are comprehension-heavy ValidatingPolicies beside the Pod
// Security examples: nested iterations over lists of the object, over
// variables built from them, and string functions on long values.
const heavyPolicies = `
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: heavy-nested
spec:
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: [v1]
        operations: [CREATE, UPDATE]
        resources: [pods]
  variables:
    - name: all
      expression: object.spec.containers + object.spec.?initContainers.orValue([])
    - name: names
      expression: variables.all.map(c, c.name)
  validations:
    - expression: >-
        variables.all.all(a, variables.all.all(b, a.name == b.name ||
        a.?securityContext.?capabilities.?add.orValue([]).all(x,
        b.?securityContext.?capabilities.?add.orValue([]).all(y, x != y || x == 'KILL'))))
      message: capabilities repeat
    - expression: >-
        object.spec.containers.all(c, c.image.startsWith('registry.example.com/') ||
        c.image.matches('^[a-z0-9.]+(/[a-z0-9-]+)*(:[a-z0-9.]+)?$'))
      message: image
    - expression: >-
        variables.names.all(n, variables.names.exists_one(m, m == n))
      message: duplicate names
    - expression: >-
        object.metadata.?labels.orValue({}).all(k, v, size(k) + size(v) < 10000 &&
        object.metadata.?annotations.orValue({}).all(k2, k2 != k || true))
      message: labels
`

// TestEstimatesBoundExactCost evaluates the Pod Security examples and
// comprehension-heavy policies on Pods of many shapes (few to many
// containers, capabilities, labels; short to long strings) and checks,
// for every program run untracked, that the cost estimate charged for the
// request's size level bounds the exact cost the API server's cost tracker
// counts (within the estimator's small undercount of dyn selections, see
// below; fastCostLimit leaves a 16× margin); and that the decision is the same when every program is
// run tracked.
func TestEstimatesBoundExactCost(t *testing.T) {
	docs, err := manifest.ReadPaths(nil, "../../deploy/examples/pod-security")
	if err != nil {
		t.Fatal(err)
	}
	heavy, err := manifest.Parse("heavy.yaml", []byte(heavyPolicies))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := engine.Compile(manifest.FromDocuments(append(docs, heavy...)), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var checked int
	var failures []string
	var worst float64
	var worstExpr string
	defer func() { t.Logf("worst ratio %.2f: %s", worst, worstExpr) }()
	celeval.SetEstimateCheck(func(st *celeval.State, p *celeval.Program, lvl int) {
		c, ok := celeval.Exact(st, p)
		if !ok {
			return
		}
		est := celeval.Estimate(p, lvl)
		mu.Lock()
		defer mu.Unlock()
		checked++
		if r := float64(c) / float64(max(est, 1)); r > worst {
			worst, worstExpr = r, fmt.Sprintf("%s: estimate %d, exact %d", p.Expr(), est, c)
		}
		// cel-go's estimator counts a field selection on a dyn value as
		// free where the tracker charges 1, so small expressions can cost
		// a little more than estimated; fastCostLimit keeps a 16× margin
		// for that. Beyond 2× (and a few units) is an estimate that does
		// not bound what it should.
		if c > 2*est+4 {
			lc, ls := celeval.SizeLevel(lvl)
			failures = append(failures, fmt.Sprintf("level {%d %d}: estimate %d < exact cost %d for %s", lc, ls, est, c, p.Expr()))
		}
	})
	t.Cleanup(func() { celeval.SetEstimateCheck(nil) })

	rng := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	for i := range 300 {
		pod := randomPod(rng)
		req := &admission.Request{Object: pod}
		req.Fill()
		fast := ps.Evaluate(ctx, req, nil)
		exact := ps.Evaluate(ctx, req, &engine.EvalOptions{ExactCost: true})
		if len(fast.Results) != len(exact.Results) {
			t.Fatalf("pod %d: %d results untracked, %d tracked", i, len(fast.Results), len(exact.Results))
		}
		for j := range fast.Results {
			f, e := fast.Results[j], exact.Results[j]
			if f.Policy != e.Policy || f.Result != e.Result || f.Message != e.Message {
				t.Errorf("pod %d, policy %s: untracked %s %q, tracked %s %q", i, f.Policy, f.Result, f.Message, e.Result, e.Message)
			}
		}
		if fast.Cost < exact.Cost {
			t.Errorf("pod %d: charged %d, less than the exact cost %d", i, fast.Cost, exact.Cost)
		}
		// The same pod decoded from JSON with its sizes measured by the
		// decoder (EvalOptions.ObjectSizes): the same level, so the same
		// decision and the same charge.
		js, err := jsonenc.AppendValue(nil, pod)
		if err != nil {
			t.Fatal(err)
		}
		decoded, sizes, err := manifest.DecodeJSONSized(js)
		if err != nil {
			t.Fatal(err)
		}
		if want := manifest.SizesOf(pod); sizes != want {
			t.Fatalf("pod %d: decoder measured %+v, the pod has %+v", i, sizes, want)
		}
		sizedReq := &admission.Request{Object: decoded}
		sizedReq.Fill()
		sized := ps.Evaluate(ctx, sizedReq, &engine.EvalOptions{ObjectSizes: &sizes})
		if sized.Cost != fast.Cost || len(sized.Results) != len(fast.Results) {
			t.Fatalf("pod %d: with measured sizes charged %d (%d results), walked %d (%d results)", i, sized.Cost, len(sized.Results), fast.Cost, len(fast.Results))
		}
		for j := range sized.Results {
			if s, f := sized.Results[j], fast.Results[j]; s.Result != f.Result || s.Message != f.Message {
				t.Errorf("pod %d, policy %s: with measured sizes %s %q, walked %s %q", i, s.Policy, s.Result, s.Message, f.Result, f.Message)
			}
		}
	}
	if checked < 1000 {
		t.Fatalf("only %d untracked evaluations checked: the test does not exercise the fast path", checked)
	}
	if len(failures) > 0 {
		t.Fatalf("%d of %d estimates below the exact cost, first: %s", len(failures), checked, failures[0])
	}
}

// randomPod builds a Pod whose list lengths and string lengths are drawn
// around the size levels' bounds.
func randomPod(rng *rand.Rand) map[string]any {
	// Each Pod draws its lengths from a prefix of these, so most Pods are
	// within a size level and some straddle one.
	sizes := []int{0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 40, 63, 64, 65}
	sizes = sizes[:1+rng.IntN(len(sizes))]
	n := func() int { return sizes[rng.IntN(len(sizes))] }
	strLens := []int{1, 5, 20, 63, 64, 65, 300, 511, 512, 513, 2000, 4096, 4097}
	strLens = strLens[:1+rng.IntN(len(strLens))]
	str := func(prefix string) string {
		l := strLens[rng.IntN(len(strLens))]
		if l <= len(prefix) {
			return prefix[:l]
		}
		return prefix + strings.Repeat("a", l-len(prefix))
	}
	caps := []string{"KILL", "NET_ADMIN", "SYS_ADMIN", "CHOWN", "NET_BIND_SERVICE", ""}
	container := func(i int) map[string]any {
		add := []any{}
		for range n() {
			add = append(add, caps[rng.IntN(len(caps))])
		}
		ports := []any{}
		for k := range n() {
			ports = append(ports, map[string]any{"containerPort": int64(8000 + k), "hostPort": int64(rng.IntN(2) * 80)})
		}
		sc := map[string]any{
			"capabilities":             map[string]any{"add": add, "drop": []any{"ALL"}},
			"allowPrivilegeEscalation": rng.IntN(4) == 0,
			"runAsNonRoot":             rng.IntN(4) != 0,
		}
		if rng.IntN(3) == 0 {
			sc["seLinuxOptions"] = map[string]any{"type": str("container_t"), "user": str("u")}
		}
		if rng.IntN(3) == 0 {
			sc["seccompProfile"] = map[string]any{"type": "RuntimeDefault"}
		}
		return map[string]any{
			"name":            fmt.Sprintf("c%d", i%5),
			"image":           str("registry.example.com/app"),
			"ports":           ports,
			"securityContext": sc,
		}
	}
	list := func(k int, f func(int) map[string]any) []any {
		out := make([]any, k)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	labels := map[string]any{}
	for i := range n() {
		labels[fmt.Sprintf("l%d", i)] = str("v")
	}
	sysctls := list(n(), func(i int) map[string]any {
		return map[string]any{"name": str("net.ipv4.ping_group_range"), "value": "1"}
	})
	volumes := list(n(), func(i int) map[string]any {
		if rng.IntN(3) == 0 {
			return map[string]any{"name": fmt.Sprintf("v%d", i), "hostPath": map[string]any{"path": str("/var")}}
		}
		return map[string]any{"name": fmt.Sprintf("v%d", i), "emptyDir": map[string]any{}}
	})
	return map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata": map[string]any{
			"name":        str("pod"),
			"namespace":   "default",
			"labels":      labels,
			"annotations": map[string]any{"last-applied": str("{")},
		},
		"spec": map[string]any{
			"hostNetwork":     rng.IntN(5) == 0,
			"securityContext": map[string]any{"sysctls": sysctls, "runAsNonRoot": true},
			"containers":      list(max(1, n()), container),
			"initContainers":  list(n()/2, container),
			"volumes":         volumes,
		},
	}
}
