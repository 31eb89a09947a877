package kubesource

import (
	"context"
	"io"
	"log/slog"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/server"
	"github.com/arbiter-pdp/arbiter/store"
)

// What cmd/arbiter passes to New and RunHA.
var _ Replica[*server.Snapshot] = (*server.Server)(nil)

// fakeSnapshot is one revision of a fakePrimary.
type fakeSnapshot struct {
	rev  uint64
	objs map[store.Key]*manifest.Object
}

func (f *fakeSnapshot) Object(k store.Key) (*manifest.Object, bool) {
	o, ok := f.objs[k]
	return o, ok
}

func (f *fakeSnapshot) Range(fn func(store.Key, *manifest.Object) bool) {
	keys := make([]store.Key, 0, len(f.objs))
	for k := range f.objs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		if !fn(k, f.objs[k]) {
			return
		}
	}
}

// fakePrimary refuses, as the server does, a write holding an object that
// does not "compile": here one whose spec has bad: true.
type fakePrimary struct {
	cur    *fakeSnapshot
	writes int
}

func (p *fakePrimary) Current() *fakeSnapshot { return p.cur }

func (p *fakePrimary) WriteObjects(_ context.Context, upserts []*manifest.Object, deletes []store.Key) (store.Commit, error) {
	p.writes++
	var les manifest.LoadErrors
	for _, o := range upserts {
		if spec, _ := o.Content["spec"].(map[string]any); spec["bad"] == true {
			les = append(les, &manifest.LoadError{Source: o.Source, Object: o.Ref(), Field: "spec.bad", Detail: "does not compile"})
		}
	}
	if les != nil {
		return store.Commit{}, les
	}
	next := &fakeSnapshot{rev: p.cur.rev + 1, objs: map[store.Key]*manifest.Object{}}
	for k, o := range p.cur.objs {
		next.objs[k] = o
	}
	var changes []store.Change
	for _, o := range upserts {
		k := store.Key{Group: o.Group(), Kind: o.Kind, Namespace: o.Namespace, Name: o.Name}
		next.objs[k] = o
		changes = append(changes, store.Change{Op: store.OpUpsert, Key: k})
	}
	for _, k := range deletes {
		delete(next.objs, k)
		changes = append(changes, store.Change{Op: store.OpDelete, Key: k})
	}
	p.cur = next
	return store.Commit{Revision: next.rev, Changes: changes}, nil
}

func validatingPolicy(name string, bad bool) item {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "policies.kyverno.io/v1", "kind": kyvernoapi.KindValidatingPolicy,
		"metadata": map[string]any{"name": name, "resourceVersion": "7"},
		"spec":     map[string]any{"bad": bad},
	}}
	return item{key: store.Key{Group: kyvernoapi.Group, Kind: kyvernoapi.KindValidatingPolicy, Name: name}, u: u}
}

// TestCommitThroughAPrimary: the source needs only the Primary interface:
// an object the primary refuses is reported (an Event) and the rest of the
// write is committed without it; a delete of what the cluster no longer
// has is committed with it.
func TestCommitThroughAPrimary(t *testing.T) {
	gone := store.Key{Group: kyvernoapi.Group, Kind: kyvernoapi.KindValidatingPolicy, Name: "gone"}
	p := &fakePrimary{cur: &fakeSnapshot{rev: 1, objs: map[store.Key]*manifest.Object{
		gone: manifest.NewObject("store:"+gone.String(), map[string]any{"apiVersion": "policies.kyverno.io/v1", "kind": kyvernoapi.KindValidatingPolicy, "metadata": map[string]any{"name": "gone"}}),
	}}}
	src, err := New(Config{Rest: &rest.Config{Host: "http://127.0.0.1:1"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, p)
	if err != nil {
		t.Fatal(err)
	}
	src.broadcaster.Shutdown() // no API server: Events go to a fake recorder
	events := record.NewFakeRecorder(10)
	src.recorder = events

	good, bad := validatingPolicy("good", false), validatingPolicy("bad", true)
	if err := src.commit(context.Background(), []item{good, bad}, []store.Key{gone}); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if p.writes != 2 {
		t.Errorf("%d writes, want 2 (refused whole, then without the bad object)", p.writes)
	}
	snap := p.Current()
	if _, ok := snap.Object(good.key); !ok {
		t.Error("the good object was not committed")
	}
	if _, ok := snap.Object(bad.key); ok {
		t.Error("the refused object was committed")
	}
	if _, ok := snap.Object(gone); ok {
		t.Error("the delete was not committed")
	}
	if st := src.Stats(); st.Commits != 1 || st.Rejected != 1 {
		t.Errorf("stats %+v, want 1 commit and 1 rejection", st)
	}
	select {
	case ev := <-events.Events:
		if !strings.Contains(ev, ReasonRejected) || !strings.Contains(ev, "spec.bad: does not compile") {
			t.Errorf("event %q does not name the reason and the field", ev)
		}
	default:
		t.Error("no Event for the refused object")
	}
	// The same resourceVersion refused again: no second Event.
	if err := src.commit(context.Background(), []item{bad}, nil); err != nil {
		t.Fatalf("commit: %v", err)
	}
	select {
	case ev := <-events.Events:
		t.Errorf("a second Event for the same resourceVersion: %q", ev)
	default:
	}
}
