package patch

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
)

// patcherCheck drives a Patcher and evanphx side by side: evanphx applies
// each patch to the JSON the previous ones left (kube-apiserver's chain of
// mutations, where a patch that fails or whose test fails leaves the object
// as it was, as a policy with failurePolicy Ignore does).
type patcherCheck struct {
	t         testing.TB
	obj       map[string]any
	objBefore map[string]any
	p         *Patcher
	state     []byte
	limit     int64
	values    [][]Op // the patches applied and a deep copy of their values
	copies    [][]Op
}

func newPatcherCheck(t testing.TB, obj map[string]any, limit int64) *patcherCheck {
	state, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &patcherCheck{t: t, obj: obj, objBefore: deepCopy(obj), p: NewPatcher(obj, Options{MaxCopyBytes: limit}), state: state, limit: limit}
}

// step applies one patch with both and compares; it returns the outcome.
func (c *patcherCheck) step(ops []Op) string {
	t := c.t
	t.Helper()
	ref, ok := referenceDoc(c.state, ops, c.limit)
	if !ok {
		return "skipped"
	}
	// The values that are (or hold) containers of the Patcher's object
	// change with it; the others must never change.
	own := containers(c.p.Object(), map[any]bool{})
	var kept []Op
	for _, op := range ops {
		if !reaches(op.Value, own) {
			kept = append(kept, op)
		}
	}
	c.values = append(c.values, kept)
	c.copies = append(c.copies, deepCopyOps(kept))
	applied, err := c.p.Apply(ops)
	ctx := func() string {
		return "\nstate: " + string(c.state) + "\nops:   " + showOps(ops)
	}
	outcome := "applied"
	switch {
	case ref.panicked != nil:
		outcome = "panic"
		if applied || !(errors.Is(err, ErrPanic) || (err == nil && hasTest(ops))) {
			t.Fatalf("evanphx panics (%v); Apply = %v, %v%s", ref.panicked, applied, err, ctx())
		}
	case errors.Is(ref.err, jsonpatch.ErrTestFailed):
		outcome = "test failed"
		if applied || err != nil {
			t.Fatalf("evanphx: %v (a no-op); Apply = %v, %v%s", ref.err, applied, err, ctx())
		}
	case ref.err != nil:
		outcome = "error"
		if applied || err == nil || err.Error() != "JSON Patch: "+ref.err.Error() {
			t.Fatalf("evanphx error:\n  JSON Patch: %v\nApply = %v, error:\n  %v%s", ref.err, applied, err, ctx())
		}
	default:
		if b := bytes.TrimSpace(ref.out); len(b) == 0 || b[0] != '{' {
			outcome = "not an object"
			if applied || !errors.Is(err, ErrNotObject) {
				t.Fatalf("evanphx result %s is no object; Apply = %v, %v%s", ref.out, applied, err, ctx())
			}
			break
		}
		if !applied || err != nil {
			t.Fatalf("evanphx result %s; Apply = %v, %v%s", ref.out, applied, err, ctx())
		}
		c.state = ref.out
	}
	got := c.p.Object()
	if leak := findRawNull(got); leak != "" {
		t.Fatalf("object holds an internal null at %s%s", leak, ctx())
	}
	gotJSON, err := json.Marshal(got)
	if err != nil {
		t.Fatalf("object does not marshal: %v%s", err, ctx())
	}
	if !sameJSON(gotJSON, c.state) {
		t.Fatalf("after the patch (%s):\nevanphx: %s\nPatcher: %s%s", outcome, c.state, gotJSON, ctx())
	}
	if !reflect.DeepEqual(c.obj, c.objBefore) {
		t.Fatalf("the Patcher modified the object it started from%s", ctx())
	}
	for i := range c.values {
		if !reflect.DeepEqual(deepCopyOps(c.values[i]), c.copies[i]) {
			t.Fatalf("the Patcher modified the values of patch %d: %s, were %s", i, showOps(c.values[i]), showOps(c.copies[i]))
		}
	}
	return outcome
}

// containers adds the identities of the maps and slices reachable from v.
func containers(v any, set map[any]bool) map[any]bool {
	switch t := v.(type) {
	case map[string]any:
		set[identity(t)] = true
		for _, e := range t {
			containers(e, set)
		}
	case []any:
		if p := identity(t); p != nil {
			set[p] = true
		}
		for _, e := range t {
			containers(e, set)
		}
	}
	return set
}

func reaches(v any, set map[any]bool) bool {
	for p := range containers(v, map[any]bool{}) {
		if set[p] {
			return true
		}
	}
	return false
}

// finish checks Diff from the starting object to the Patcher's.
func (c *patcherCheck) finish() {
	c.t.Helper()
	checkDiff(c.t, c.obj, deepCopy(c.p.Object()))
	checkDiff(c.t, c.obj, c.p.Object())
}

func TestPatcher(t *testing.T) {
	obj := decodeObject(t, `{"a":{"k":"v"},"l":[1,2],"m":{}}`)
	c := newPatcherCheck(t, obj, 0)
	c.step([]Op{{Op: "add", Path: "/a/x", Value: int64(1)}, {Op: "add", Path: "/l/-", Value: int64(3)}})
	// A value that is a container of the Patcher's own object.
	c.step([]Op{{Op: "add", Path: "/b", Value: c.p.Object()["a"]}, {Op: "add", Path: "/c", Value: map[string]any{"in": c.p.Object()["l"]}}})
	c.step([]Op{{Op: "add", Path: "/a/y", Value: int64(2)}, {Op: "add", Path: "/l/0", Value: int64(0)}, {Op: "remove", Path: "/b/k"}})
	// Undone: a failed test after changes, then a failing patch.
	if got := c.step([]Op{{Op: "add", Path: "/a/z", Value: int64(3)}, {Op: "remove", Path: "/m"}, {Op: "test", Path: "/a/k", Value: "no"}}); got != "test failed" {
		t.Fatalf("outcome %s", got)
	}
	if got := c.step([]Op{{Op: "replace", Path: "/l/1", Value: "x"}, {Op: "add", Path: "/a/w", Value: nil}, {Op: "add", Path: "/missing/x", Value: int64(1)}}); got != "error" {
		t.Fatalf("outcome %s", got)
	}
	if got := c.step([]Op{{Op: "add", Path: "/n", Value: nil}, {Op: "add", Path: "/n/x", Value: int64(1)}}); got != "panic" {
		t.Fatalf("outcome %s", got)
	}
	if got := c.step([]Op{{Op: "copy", From: "/a", Path: "/d"}, {Op: "replace", Path: "", Value: []any{}}}); got != "not an object" {
		t.Fatalf("outcome %s", got)
	}
	c.step([]Op{{Op: "copy", From: "/a", Path: "/d"}, {Op: "add", Path: "/d/q", Value: true}, {Op: "move", From: "/c/in", Path: "/m/in"}})
	// A null set by a patch is a plain null to the next one.
	c.step([]Op{{Op: "add", Path: "/n", Value: nil}})
	if got := c.step([]Op{{Op: "add", Path: "/n/x", Value: int64(1)}}); got != "error" {
		t.Fatalf("outcome %s", got)
	}
	if got := c.step([]Op{{Op: "test", Path: "/n", Value: NoValue{}}, {Op: "replace", Path: "", Value: map[string]any{"fresh": c.p.Object()["a"]}}}); got != "applied" {
		t.Fatalf("outcome %s", got)
	}
	c.step([]Op{{Op: "add", Path: "/fresh/again", Value: int64(4)}})
	// A value is read as it was before the patch, though an operation
	// before it changes the container it holds in place.
	c.step([]Op{{Op: "add", Path: "/fresh/late", Value: true}, {Op: "add", Path: "/snapshot", Value: c.p.Object()["fresh"]}})
	if show(c.p.Object()["snapshot"]) != `{"again":4,"k":"v","x":1,"y":2}` {
		t.Errorf("snapshot %s", show(c.p.Object()["snapshot"]))
	}
	c.step([]Op{{Op: "remove", Path: "/snapshot"}, {Op: "remove", Path: "/fresh/late"}})

	// Savepoints: changes since, rolled back or compared.
	sp := c.savepoint()
	c.step([]Op{{Op: "add", Path: "/fresh/k", Value: "w"}, {Op: "add", Path: "/fresh/n", Value: []any{int64(1)}}})
	c.step([]Op{{Op: "add", Path: "/fresh/n/0", Value: int64(0)}, {Op: "remove", Path: "/fresh/x"}})
	if !c.changed(sp) {
		t.Error("no change seen")
	}
	c.rollback(sp)
	sp = c.savepoint()
	c.step([]Op{{Op: "add", Path: "/fresh/k", Value: "w"}, {Op: "remove", Path: "/fresh/x"}})
	c.step([]Op{{Op: "add", Path: "/fresh/k", Value: "v"}, {Op: "add", Path: "/fresh/x", Value: 1.0}})
	if c.changed(sp) {
		t.Error("changed, though every change was undone")
	}
	c.p.Release()
	c.finish()
	if show(c.p.Object()) != `{"fresh":{"again":4,"k":"v","x":1,"y":2}}` {
		t.Errorf("final object %s", show(c.p.Object()))
	}

	// SetObject: the Patcher owns nothing of the new object.
	other := decodeObject(t, `{"z":{"y":[1]}}`)
	otherBefore := deepCopy(other)
	c.p.SetObject(other)
	if ok, err := c.p.Apply([]Op{{Op: "add", Path: "/z/y/-", Value: int64(2)}, {Op: "add", Path: "/z/x", Value: int64(0)}}); !ok || err != nil {
		t.Fatalf("Apply after SetObject: %v, %v", ok, err)
	}
	if !reflect.DeepEqual(other, otherBefore) || show(c.p.Object()) != `{"z":{"x":0,"y":[1,2]}}` {
		t.Errorf("SetObject: %s (was %s, now %s)", show(c.p.Object()), show(otherBefore), show(other))
	}
}

// TestGeneratedPatcher runs FuzzPatcher's generator on pseudo-random inputs
// and checks that it reaches every outcome.
func TestGeneratedPatcher(t *testing.T) {
	objects := corpusObjects(t)
	n := 1500
	if testing.Short() {
		n = 200
	}
	rng := rand.New(rand.NewPCG(3, 4))
	counts := map[string]int{}
	for range n {
		data := make([]byte, 96)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		for o, k := range runPatcher(t, objects, data) {
			counts[o] += k
		}
	}
	t.Logf("outcomes of the patches of %d generated chains: %v", n, counts)
	for _, o := range []string{"applied", "error", "test failed", "panic", "not an object", "rolled back", "changed since the savepoint", "unchanged since the savepoint"} {
		if counts[o] == 0 {
			t.Errorf("no generated patch had the outcome %q: %v", o, counts)
		}
	}
}

func runPatcher(t testing.TB, objects []map[string]any, data []byte) map[string]int {
	g := &gen{b: data}
	obj := objects[g.intn(len(objects))]
	var limit int64
	if g.intn(8) == 0 {
		limit = int64(g.byte()) * 8
	}
	c := newPatcherCheck(t, obj, limit)
	counts := map[string]int{}
	var sp *savepointCheck
	for range 2 + g.intn(5) {
		switch {
		case sp == nil && g.intn(3) == 0:
			sp = c.savepoint()
		case sp != nil && g.intn(3) == 0:
			// Back to the savepoint, or keep the patches since.
			if g.intn(2) == 0 {
				c.rollback(sp)
				counts["rolled back"]++
			} else {
				c.p.Release()
			}
			sp = nil
		}
		// Paths and values in the Patcher's object: values share its
		// containers.
		counts[c.step(g.ops(c.p.Object()))]++
		if sp != nil {
			if c.changed(sp) {
				counts["changed since the savepoint"]++
			} else {
				counts["unchanged since the savepoint"]++
			}
		}
	}
	if sp != nil && g.intn(2) == 0 {
		c.rollback(sp)
	}
	c.finish()
	return counts
}

// savepointCheck is a Savepoint with the object as it was then.
type savepointCheck struct {
	sp    Savepoint
	obj   any // a deep copy
	state []byte
}

func (c *patcherCheck) savepoint() *savepointCheck {
	return &savepointCheck{sp: c.p.Savepoint(), obj: deepCopy(c.p.Object()), state: c.state}
}

// rollback rolls back to sp and checks the object is as it was then.
func (c *patcherCheck) rollback(sp *savepointCheck) {
	c.t.Helper()
	c.p.Rollback(sp.sp)
	c.p.Release()
	if !reflect.DeepEqual(any(c.p.Object()), sp.obj) {
		c.t.Fatalf("after Rollback: %s, was %s", show(c.p.Object()), show(sp.obj))
	}
	c.state = sp.state
}

// changed checks Changed against Equal on a copy of the object at sp.
func (c *patcherCheck) changed(sp *savepointCheck) bool {
	c.t.Helper()
	got := c.p.Changed(sp.sp)
	if want := !Equal(sp.obj, c.p.Object()); got != want {
		c.t.Fatalf("Changed = %v, want %v: was %s, now %s", got, want, show(sp.obj), show(c.p.Object()))
	}
	return got
}

// FuzzPatcher checks chains of generated patches through a Patcher against
// evanphx applying them one after the other to JSON.
func FuzzPatcher(f *testing.F) {
	objects := corpusObjects(f)
	for i := range 64 {
		f.Add([]byte{byte(i), byte(i * 5), byte(i * 19), byte(i * 23), byte(i * 37), 1, 4, 1, 4, 2, 1, 3, 5, 6, 2, 3, 7, 3, 0, 9, 5})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		runPatcher(t, objects, data)
	})
}
