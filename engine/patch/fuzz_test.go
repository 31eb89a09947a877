package patch

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"testing"
)

// seedPatches are realistic patches (and a few broken ones) for the corpus
// objects: labels, annotations with "/" and "~" in their keys, containers,
// tests that pass and fail, moves and copies, negative indexes.
var seedPatches = []string{
	`[{"op":"add","path":"/metadata/labels/team","value":"payments"}]`,
	`[{"op":"add","path":"/metadata/annotations/policy.example.com~1mutated","value":"true"},{"op":"replace","path":"/spec/containers/0/image","value":"registry.example.com/shop/web:1.8.4"}]`,
	`[{"op":"add","path":"/metadata/labels/team","value":"a"},{"op":"add","path":"/metadata/annotations/a~1b","value":"c"},{"op":"replace","path":"/spec/containers/0/image","value":"nginx:1.27"}]`,
	`[{"op":"test","path":"/metadata/labels/app","value":"web"},{"op":"add","path":"/spec/containers/-","value":{"name":"proxy","image":"envoy:1.30","resources":{}}}]`,
	`[{"op":"test","path":"/metadata/labels/app","value":"api"},{"op":"remove","path":"/metadata/labels"}]`,
	`[{"op":"add","path":"/spec/containers/0/env/-1","value":{"name":"X","value":"1"}},{"op":"remove","path":"/spec/containers/-1"}]`,
	`[{"op":"move","from":"/metadata/labels/tier","path":"/metadata/annotations/tier"},{"op":"copy","from":"/spec/containers/0","path":"/spec/initContainers/0"}]`,
	`[{"op":"copy","from":"/metadata/annotations/example.com~1owner~0team","path":"/metadata/labels/owner"},{"op":"test","path":"/spec/terminationGracePeriodSeconds","value":30.0}]`,
	`[{"op":"add","path":"/metadata/labels/x","value":null},{"op":"add","path":"/metadata/labels/x/y","value":1}]`,
	`[{"op":"replace","path":"/spec/replicas","value":5},{"op":"test","path":"/spec/template/spec/containers/1/args","value":[]}]`,
	`[{"op":"add","path":"/spec/template/metadata/annotations/a~1b~0c","value":"d"},{"op":"remove","path":"/metadata/annotations/"}]`,
	`[{"op":"test","path":"/spec/flags","value":[true,false,null]}]`,
	`[{"op":"test","path":"/spec/nothing"},{"op":"test","path":"/spec/empty","value":null},{"op":"replace","path":"/spec/one","value":1.0}]`,
	`[{"op":"test","path":"/spec/paths","value":{"a/b":1,"c~d":2,"~1":3,"~0":4,"":5,"x y":6}},{"op":"remove","path":"/spec/paths/~01"}]`,
	`[{"op":"replace","path":"","value":{"apiVersion":"v1","kind":"ConfigMap"}},{"op":"add","path":"/data","value":{}}]`,
	`[{"op":"replace","path":"","value":[1]}]`,
	`[{"op":"copy","from":"/spec","path":"/spec/copy"},{"op":"copy","from":"/spec","path":"/spec/copy2"}]`,
	`[{"op":"move","from":"/spec","path":"/spec/x"}]`,
	`[{"op":"add","path":"metadata/labels","value":1},{"op":"add","path":"/a\u0001","value":1}]`,
	`[{"op":"test","path":"/spec/strings","value":["<a & b>","\u2028","é","~","/","~1",""]}]`,
}

func FuzzApplyJSONPatch(f *testing.F) {
	objects := corpus(f)
	for _, doc := range objects {
		for i, p := range seedPatches {
			f.Add(doc, p, uint16(0))
			if i%4 == 0 {
				f.Add(doc, p, uint16(200))
			}
		}
	}
	f.Fuzz(func(t *testing.T, doc, patch string, limit uint16) {
		obj, err := decodeJSONObject(doc)
		if err != nil {
			return
		}
		ops, err := decodeOps([]byte(patch))
		if err != nil || len(ops) > 64 {
			return
		}
		checkAgainstReference(t, obj, ops, int64(limit))
	})
}

// FuzzApplyJSONPatchGenerated checks patches generated against the corpus
// objects (paths into them, changed or not; values from the objects
// themselves, shared) against evanphx.
func FuzzApplyJSONPatchGenerated(f *testing.F) {
	objects := corpusObjects(f)
	for i := range 64 {
		f.Add([]byte{byte(i), byte(i * 7), byte(i * 13), byte(i * 31), byte(i * 61), 3, 1, 4, 1, 5, 9, 2, 6})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &gen{b: data}
		obj := objects[g.intn(len(objects))]
		var limit int64
		if g.intn(8) == 0 {
			limit = int64(g.byte()) * 8
		}
		ops := g.ops(obj)
		checkAgainstReference(t, obj, ops, limit)
	})
}

func decodeJSONObject(doc string) (map[string]any, error) {
	var probe any
	if err := json.Unmarshal([]byte(doc), &probe); err != nil {
		return nil, err
	}
	v, err := decodeValue([]byte(doc))
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok || m == nil {
		return nil, errNotMap
	}
	return m, nil
}

var errNotMap = errors.New("not a JSON object")

// corpusObjects decodes the corpus objects, plus small ones.
func corpusObjects(t testing.TB) []map[string]any {
	var objs []map[string]any
	for _, name := range []string{"custom.json", "deployment.json", "pod.json"} {
		objs = append(objs, decodeObject(t, corpus(t)[name]))
	}
	for _, js := range []string{base, `{}`, `{"a":[null,{"b":null}],"c":[[]],"d":{"":{"~":[1,1.5]}}}`} {
		objs = append(objs, decodeObject(t, js))
	}
	return objs
}

// TestGeneratedPatches runs the generator of FuzzApplyJSONPatchGenerated on
// pseudo-random inputs, and checks that it reaches every outcome: patches
// applied, errors, failed tests, evanphx's panics, non-object results.
func TestGeneratedPatches(t *testing.T) {
	objects := corpusObjects(t)
	n := 4000
	if testing.Short() {
		n = 500
	}
	rng := rand.New(rand.NewPCG(1, 2))
	counts := map[string]int{}
	for range n {
		data := make([]byte, 48)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		g := &gen{b: data}
		obj := objects[g.intn(len(objects))]
		var limit int64
		if g.intn(8) == 0 {
			limit = int64(g.byte()) * 8
		}
		counts[checkAgainstReference(t, obj, g.ops(obj), limit)]++
	}
	t.Logf("outcomes of %d generated patches: %v", n, counts)
	for _, o := range []string{"applied", "error", "test failed", "panic", "not an object"} {
		if counts[o] == 0 {
			t.Errorf("no generated patch had the outcome %q: %v", o, counts)
		}
	}
	if counts["applied"] < n/10 {
		t.Errorf("only %d of %d generated patches applied: %v", counts["applied"], n, counts)
	}
}
