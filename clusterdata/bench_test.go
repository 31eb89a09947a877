package clusterdata_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-pdp/arbiter/clusterdata"
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// The scale of issue 18: 50,000 ConfigMaps in 500 namespaces.
const (
	benchNamespaces = 500
	benchPerNS      = 100
)

// benchJSON is the stored form of the 50,000 ConfigMaps (canonical JSON,
// as the store keeps them), built once.
var benchJSON = sync.OnceValue(func() [][]byte {
	out := make([][]byte, 0, benchNamespaces*benchPerNS)
	for ns := 0; ns < benchNamespaces; ns++ {
		for i := 0; i < benchPerNS; i++ {
			o := map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": fmt.Sprintf("cm-%03d", i), "namespace": fmt.Sprintf("ns-%03d", ns),
					"labels": map[string]any{"app": fmt.Sprintf("app-%d", i%10), "team": fmt.Sprintf("team-%d", ns%7)},
					"uid":    fmt.Sprintf("%08d-0000-0000-0000-000000000000", ns*benchPerNS+i), "resourceVersion": "12345"},
				"data": map[string]any{"key": "value", "config.yaml": "a: 1\nb: two\n"}}
			b, _ := json.Marshal(o)
			out = append(out, b)
		}
	}
	return out
})

func decodeAll(b testing.TB, raw [][]byte) []*manifest.Object {
	objs := make([]*manifest.Object, len(raw))
	for i, r := range raw {
		content, err := manifest.DecodeJSON(r)
		if err != nil {
			b.Fatal(err)
		}
		objs[i] = manifest.NewObject("bench", content)
	}
	return objs
}

var benchView = sync.OnceValue(func() *clusterdata.View {
	return clusterdata.New(decodeAll(&testing.B{}, benchJSON()))
})

// BenchmarkColdStart decodes 50,000 stored ConfigMaps and indexes them (a
// replica starting on a store of context objects), reporting the heap the
// view keeps.
func BenchmarkColdStart(b *testing.B) {
	raw := benchJSON()
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		if clusterdata.New(decodeAll(b, raw)).Len() != benchNamespaces*benchPerNS {
			b.Fatal("len")
		}
	}
	reportCPU(b, start)
	b.StopTimer()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := clusterdata.New(decodeAll(b, raw))
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heap-MB")
	runtime.KeepAlive(v)
}

// BenchmarkList lists one namespace's 100 ConfigMaps, through the
// decision's Context (recording the read).
func BenchmarkList(b *testing.B) {
	v := benchView()
	b.ReportAllocs()
	nss := benchNamespaceNames()
	i := 0
	start := cpuTime()
	for b.Loop() {
		c := &clusterdata.Context{Resources: v, Reads: &clusterdata.Reads{}}
		list, err := c.ListResources(context.Background(), "v1", "configmaps", nss[i%benchNamespaces], nil)
		if err != nil || len(list.Items) != benchPerNS {
			b.Fatal(err)
		}
		i++
	}
	reportCPU(b, start)
}

// BenchmarkListLabels lists one namespace filtered by a label.
func BenchmarkListLabels(b *testing.B) {
	v := benchView()
	b.ReportAllocs()
	sel := map[string]string{"app": "app-3"}
	start := cpuTime()
	for b.Loop() {
		list, err := v.ListResources(context.Background(), "v1", "configmaps", "ns-042", sel)
		if err != nil || len(list.Items) != benchPerNS/10 {
			b.Fatal(err, len(list.Items))
		}
	}
	reportCPU(b, start)
}

// BenchmarkGet gets one ConfigMap by name, through the decision's Context.
func BenchmarkGet(b *testing.B) {
	v := benchView()
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		c := &clusterdata.Context{Resources: v, Reads: &clusterdata.Reads{}}
		o, err := c.GetResource(context.Background(), "v1", "configmaps", "ns-250", "cm-050")
		if err != nil || o.GetName() != "cm-050" {
			b.Fatal(err)
		}
	}
	reportCPU(b, start)
}

// BenchmarkApplyOne commits one changed ConfigMap to the 50,000-object
// view: a copy of its namespace's bucket and of the kind's namespace map,
// not of the view.
func BenchmarkApplyOne(b *testing.B) {
	v := benchView()
	o := configMap("ns-123", "cm-007", map[string]any{"changed": "yes"})
	changes := []clusterdata.Change{{Key: clusterdata.KeyOf(o), Object: o}}
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		if v.Apply(changes).Len() != benchNamespaces*benchPerNS {
			b.Fatal("len")
		}
	}
	reportCPU(b, start)
}

// BenchmarkDecision measures resource.List and resource.Get inside a
// decision: a ValidatingPolicy whose validation reads the request's
// namespace's ConfigMaps (list) or one of them (get), against the same
// policy reading nothing (none); the difference is the cost of the call.
func BenchmarkDecision(b *testing.B) {
	v := benchView()
	policy := func(expr string) *engine.PolicySet {
		doc := `{"apiVersion":"policies.kyverno.io/v1","kind":"ValidatingPolicy","metadata":{"name":"p"},"spec":{
			"validationActions":["Deny"],
			"matchConstraints":{"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["configmaps"]}]},
			"validations":[{"expression":` + strconvQuote(expr) + `}]}}`
		content, err := manifest.DecodeJSON([]byte(doc))
		if err != nil {
			b.Fatal(err)
		}
		ps, err := engine.Compile([]*manifest.Object{manifest.NewObject("bench", content)}, engine.Options{})
		if err != nil {
			b.Fatal(err)
		}
		return ps
	}
	for _, tc := range []struct{ name, expr string }{
		{"none", `size(object.metadata.namespace) < 1000`},
		{"list", `size(resource.List("v1", "configmaps", object.metadata.namespace).items) < 1000`},
		{"get", `resource.Get("v1", "configmaps", object.metadata.namespace, "cm-050").data.key == "value"`},
		{"get10", repeat(`resource.Get("v1", "configmaps", object.metadata.namespace, "cm-0%d0").data.key == "value"`, " && ")},
		{"list10", repeat(`size(resource.List("v1", "configmaps", object.metadata.namespace, {"app": "app-%d"}).items) < 1000`, " && ")},
	} {
		ps := policy(tc.expr)
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			reqs := make([]*admission.Request, benchNamespaces)
			for i, ns := range benchNamespaceNames() {
				reqs[i] = request(ns, "new")
			}
			i := 0
			start := cpuTime()
			for b.Loop() {
				c := &clusterdata.Context{Resources: v, Reads: &clusterdata.Reads{}}
				d := ps.Evaluate(context.Background(), reqs[i%benchNamespaces], &engine.EvalOptions{Context: c})
				if !d.Allowed {
					b.Fatal(d.Message)
				}
				i++
			}
			reportCPU(b, start)
		})
	}
}

// reportCPU reports the process's CPU time per operation since start.
func reportCPU(b *testing.B, start time.Duration) {
	if used := cpuTime() - start; used > 0 && b.N > 0 {
		b.ReportMetric(float64(used.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

var benchNamespaceNames = sync.OnceValue(func() []string {
	out := make([]string, benchNamespaces)
	for i := range out {
		out[i] = fmt.Sprintf("ns-%03d", i)
	}
	return out
})

// repeat joins ten copies of format, with 0..9 for its %d.
func repeat(format, sep string) string {
	parts := make([]string, 10)
	for i := range parts {
		parts[i] = fmt.Sprintf(format, i)
	}
	return strings.Join(parts, sep)
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// BenchmarkViewGet is View.GetResource alone (no read record).
func BenchmarkViewGet(b *testing.B) {
	v := benchView()
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		o, err := v.GetResource(context.Background(), "v1", "configmaps", "ns-250", "cm-050")
		if err != nil || o.GetName() != "cm-050" {
			b.Fatal(err)
		}
	}
	reportCPU(b, start)
}
