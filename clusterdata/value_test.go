package clusterdata

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/arbiter-pdp/arbiter/engine/jsonval"
)

// getCases are reads of testView, found or not.
var getCases = []struct{ apiVersion, resource, ns, name string }{
	{"v1", "configmaps", "a", "cm1"},
	{"v1", "configmaps", "b", "cm1"},
	{"v1", "configmaps", "b", "cm2"},
	{"v1", "configmaps", "a", "cm2"},
	{"v1", "configmaps", "", "cm1"},
	{"v1", "namespaces", "", "a"},
	{"v1", "pods", "a", "x"},
	{"v1", "nothings", "a", "x"},
	{"v1", "configmaps/status", "a", "cm1"},
	{"example.com/v1beta1", "widgets", "b", "w2"},
	{"example.com/v1", "widgets", "b", "w2"},
	{"other.io/v2", "gadgets", "", "g"},
	{"other.io/v1", "gadgets", "", "g"},
	{"not/a/version", "configmaps", "a", "cm1"},
}

// GetResourceValue reads what GetResource reads, with the same errors, as
// one value per object.
func TestViewGetResourceValue(t *testing.T) {
	v := testView()
	ctx := context.Background()
	for _, tc := range getCases {
		o, err := v.GetResource(ctx, tc.apiVersion, tc.resource, tc.ns, tc.name)
		val, verr := v.GetResourceValue(ctx, tc.apiVersion, tc.resource, tc.ns, tc.name)
		if err != nil {
			if verr == nil || verr.Error() != err.Error() || apierrors.IsNotFound(verr) != apierrors.IsNotFound(err) || val != nil {
				t.Errorf("%v: value %v, error %v; GetResource's error %v", tc, val, verr, err)
			}
			continue
		}
		if verr != nil {
			t.Errorf("%v: %v", tc, verr)
			continue
		}
		if val.Equal(jsonval.Of(o.Object)) != types.True || !sameContent(val, o.Object) {
			t.Errorf("%v: value %v, want the object %v", tc, val, o.Object)
		}
		if again, _ := v.GetResourceValue(ctx, tc.apiVersion, tc.resource, tc.ns, tc.name); again != val {
			t.Errorf("%v: a second read made a second value", tc)
		}
	}
}

func sameContent(val ref.Val, content map[string]any) bool {
	m, ok := val.Value().(map[string]any)
	return ok && len(m) == len(content) && reflectPointer(m) == reflectPointer(content)
}

func reflectPointer(m map[string]any) uintptr {
	return uintptr(reflect.ValueOf(m).UnsafePointer())
}

// A view made by Apply keeps the values of the objects it keeps, and reads
// changed objects anew; the earlier view is unchanged.
func TestViewValueAcrossApply(t *testing.T) {
	v := testView()
	ctx := context.Background()
	get := func(v *View, ns, name string) ref.Val {
		t.Helper()
		val, err := v.GetResourceValue(ctx, "v1", "configmaps", ns, name)
		if err != nil {
			t.Fatal(err)
		}
		return val
	}
	cm0, cm1, b1 := get(v, "a", "cm0"), get(v, "a", "cm1"), get(v, "b", "cm1")
	changed := obj("v1", "ConfigMap", "a", "cm1", map[string]string{"app": "changed"})
	v2 := v.Apply([]Change{
		{Key: KeyOf(changed), Object: changed},
		{Key: Key{Kind: "ConfigMap", Namespace: "a", Name: "cm00"}, Object: obj("v1", "ConfigMap", "a", "cm00", nil)},
	})
	if get(v2, "a", "cm0") != cm0 || get(v2, "b", "cm1") != b1 {
		t.Error("the value of an unchanged object was made again")
	}
	labels := func(val ref.Val) ref.Val {
		md := val.(traits.Indexer).Get(types.String("metadata"))
		return md.(traits.Indexer).Get(types.String("labels")).(traits.Indexer).Get(types.String("app"))
	}
	if got := labels(get(v2, "a", "cm1")); got != types.String("changed") {
		t.Errorf("changed object reads %v", got)
	}
	if get(v, "a", "cm1") != cm1 || labels(cm1) != types.String("web") {
		t.Error("the earlier view's value changed")
	}
	if _, err := v2.GetResourceValue(ctx, "v1", "configmaps", "a", "cm00"); err != nil {
		t.Error(err)
	}
	// Names stay in order and found after packing.
	for _, name := range []string{"cm0", "cm00", "cm1"} {
		if _, err := v2.GetResource(ctx, "v1", "configmaps", "a", name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Concurrent decisions read one value (go test -race).
func TestViewValueConcurrent(t *testing.T) {
	v := testView()
	var wg sync.WaitGroup
	vals := make([]ref.Val, 8)
	for i := range vals {
		wg.Go(func() {
			c := &Context{Resources: v, Reads: &Reads{}}
			val, err := c.GetResourceValue(context.Background(), "v1", "configmaps", "b", "cm2")
			if err != nil {
				t.Error(err)
				return
			}
			md := val.(traits.Indexer).Get(types.String("metadata")).(traits.Mapper)
			if got := md.Get(types.String("labels")).(traits.Indexer).Get(types.String("tier")); got != types.String("front") {
				t.Errorf("tier %v", got)
			}
			vals[i] = val
		})
	}
	wg.Wait()
	for _, val := range vals[1:] {
		if val != vals[0] {
			t.Fatal("concurrent reads made several values")
		}
	}
}

// readerOnly hides a view's values: the Context converts the object
// GetResource returns.
type readerOnly struct{ Reader }

// Context.GetResourceValue records what GetResource records, and reads
// alike from a view and from a Reader without values.
func TestContextGetResourceValueReads(t *testing.T) {
	v := testView()
	ctx := context.Background()
	for _, tc := range getCases {
		viaGet := &Context{Resources: v, Reads: &Reads{}}
		o, err := viaGet.GetResource(ctx, tc.apiVersion, tc.resource, tc.ns, tc.name)
		for _, c := range []*Context{{Resources: v, Reads: &Reads{}}, {Resources: readerOnly{v}, Reads: &Reads{}}} {
			val, verr := c.GetResourceValue(ctx, tc.apiVersion, tc.resource, tc.ns, tc.name)
			if got, want := c.Reads.List(), viaGet.Reads.List(); len(got) != 1 || got[0] != want[0] {
				t.Errorf("%v (%T): reads %v, want %v", tc, c.Resources, got, want)
			}
			switch {
			case err != nil:
				if verr == nil || verr.Error() != err.Error() {
					t.Errorf("%v (%T): error %v, want %v", tc, c.Resources, verr, err)
				}
			case verr != nil || val.Equal(jsonval.Of(o.Object)) != types.True:
				t.Errorf("%v (%T): %v %v", tc, c.Resources, val, verr)
			}
		}
	}
	if _, err := (&Context{}).GetResourceValue(ctx, "v1", "configmaps", "a", "b"); err == nil || err.Error() != "resource.Get: "+ErrNoObjects.Error() {
		t.Errorf("no objects: %v", err)
	}
}

// Reads keeps every read across its chunks, and lists each once, in order.
func TestReadsChunks(t *testing.T) {
	var rs Reads
	if rs.List() != nil {
		t.Fatal("reads listed before any")
	}
	var want []Read
	for i := 36; i >= 0; i-- {
		r := Read{Op: OpGet, APIVersion: "v1", Resource: "configmaps", Namespace: "a", Name: fmt.Sprintf("cm%02d", i), Count: 1}
		rs.add(r)
		if i%5 == 0 {
			rs.add(r) // read twice
		}
		want = append([]Read{r}, want...)
	}
	if got := rs.List(); !reflect.DeepEqual(got, want) {
		t.Fatalf("listed %d reads:\n%v\nwant %d:\n%v", len(got), got, len(want), want)
	}
}
