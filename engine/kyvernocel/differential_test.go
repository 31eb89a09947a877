package kyvernocel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// oracleResult is one line of testdata/differential/*.json: what Kyverno's
// own libraries returned for an expression (see testdata/differential/oracle).
type oracleResult struct {
	Expr         string `json:"expr"`
	CompileError string `json:"compileError,omitempty"`
	Error        string `json:"error,omitempty"`
	Value        any    `json:"value,omitempty"`
	Null         bool   `json:"null,omitempty"`
	String       string `json:"string,omitempty"`
}

// oracleContext is the Context equivalent of the oracle's mocks.
type oracleContext struct{}

var oracleGR = schema.GroupResource{Resource: "configmaps"}

func (oracleContext) GetResource(_ context.Context, apiVersion, res, ns, name string) (*unstructured.Unstructured, error) {
	switch name {
	case "missing":
		return nil, kerrors.NewNotFound(oracleGR, name)
	case "forbidden":
		return nil, kerrors.NewForbidden(oracleGR, name, errors.New("nope"))
	case "boom":
		return nil, errors.New("boom")
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": res, "metadata": map[string]any{"name": name, "namespace": ns}}}, nil
}

func (oracleContext) ListResources(_ context.Context, _, res, ns string, labels map[string]string) (*unstructured.UnstructuredList, error) {
	if res == "boom" {
		return nil, kerrors.NewBadRequest("boom resource not found")
	}
	l := &unstructured.UnstructuredList{}
	l.Items = append(l.Items, unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "a", "namespace": ns}, "labels": fmt.Sprint(labels)}})
	return l, nil
}

func (oracleContext) PostResource(_ context.Context, _, _, ns string, data map[string]any) (*unstructured.Unstructured, error) {
	return &unstructured.Unstructured{Object: map[string]any{"posted": data, "ns": ns}}, nil
}

func (oracleContext) ToGVR(context.Context, string, string) (*schema.GroupVersionResource, error) {
	return &schema.GroupVersionResource{Version: "v1", Resource: "pods"}, nil
}

func (oracleContext) GetGlobalReference(_ context.Context, name, proj string) (any, error) {
	switch name {
	case "missing":
		return nil, nil
	case "boom":
		return nil, errors.New("boom")
	}
	return map[string]any{"name": name, "projection": proj, "n": 2}, nil
}

func (oracleContext) GetImageData(_ context.Context, img string) (map[string]any, error) {
	if img == "missing" {
		return nil, fmt.Errorf("image data for %s not found in the context", img)
	}
	return map[string]any{"image": img, "manifest": map[string]any{"a": 1}}, nil
}

func (oracleContext) HTTP() HTTPContext { return oracleHTTP{} }

type oracleHTTP struct{}

func (oracleHTTP) Get(_ context.Context, url string, headers map[string]string) (any, error) {
	if url == "https://fail.example.com" {
		return nil, errors.New("boom")
	}
	return map[string]any{"body": map[string]any{"url": url, "headers": headers}, "statusCode": 200}, nil
}

func (oracleHTTP) Post(_ context.Context, url string, data any, headers map[string]string) (any, error) {
	raw, _ := json.Marshal(data)
	return map[string]any{"body": map[string]any{"url": url, "data": string(raw), "headers": headers}, "statusCode": 201}, nil
}

func (h oracleHTTP) Client(_ context.Context, ca string) (HTTPContext, error) {
	if ca == "" {
		return h, nil
	}
	return nil, errors.New("failed to parse PEM CA bundle for APICall")
}

// differentialExceptions are the expressions where Arbiter deliberately
// differs from Kyverno 1.19.1 (see the package documentation).
var differentialExceptions = map[string]string{
	// Kyverno's http.Client returns a value its own Get/Post overloads
	// refuse at runtime ("no such overload"); Arbiter's works.
	`http.Client("").Get("https://example.com/c")`: "works",
	// cel-go v0.30 (Kyverno) turns the Go GVR struct into a generic object;
	// Arbiter has its own opaque value, which is not JSON-convertible.
	`resource.ToGVR("v1","Pod")`: "opaque",
}

func TestDifferential(t *testing.T) {
	for _, file := range []string{"cluster", "namespaced"} {
		t.Run(file, func(t *testing.T) {
			raw, err := os.ReadFile("testdata/differential/" + file + ".json")
			if err != nil {
				t.Fatal(err)
			}
			var golden []oracleResult
			if err := json.Unmarshal(raw, &golden); err != nil {
				t.Fatal(err)
			}
			if len(golden) < 400 {
				t.Fatalf("only %d oracle results", len(golden))
			}
			ns := ""
			if file == "namespaced" {
				ns = "ns1"
			}
			env := newTestEnv(t, Options{Namespaced: ns != ""})
			act := Bind(oracleContext{}, ns)
			act["object"] = map[string]any{}
			for _, want := range golden {
				got := oracleResult{Expr: want.Expr}
				ast, iss := env.Compile(want.Expr)
				if iss.Err() != nil {
					got.CompileError = iss.Err().Error()
				} else if prg, err := env.Program(ast); err != nil {
					got.CompileError = err.Error()
				} else {
					val, _, err := prg.Eval(act)
					if err != nil {
						got.Error = err.Error()
					} else {
						fillOracle(&got, val)
					}
				}
				if ns != "" && strings.HasPrefix(want.Expr, "globalContext.") && !strings.HasPrefix(want.Error, "no such overload") {
					// Kyverno's vpol compiler (not the sdk library the oracle
					// runs) refuses the global context in namespaced policies.
					want = oracleResult{Expr: want.Expr, Error: "failed to get global reference: " + GlobalContextNotAllowedMessage}
				}
				compareOracle(t, want, got)
			}
		})
	}
}

func compareOracle(t *testing.T, want, got oracleResult) {
	t.Helper()
	name := want.Expr
	if len(name) > 120 {
		name = name[:120] + "..."
	}
	if exc, ok := differentialExceptions[want.Expr]; ok {
		switch exc {
		case "works":
			if got.Error != "" || got.CompileError != "" {
				t.Errorf("%s: want a value, got %+v", name, got)
			}
		case "opaque":
			if got.String == "" {
				t.Errorf("%s: want an opaque value, got %+v", name, got)
			}
		}
		return
	}
	switch {
	case want.CompileError != "":
		if got.CompileError == "" {
			t.Errorf("%s: Kyverno does not compile it (%s), Arbiter does", name, firstLine(want.CompileError))
		}
	case got.CompileError != "":
		t.Errorf("%s: does not compile: %s", name, got.CompileError)
	case strings.HasPrefix(want.Error, "internal error:"):
		// Kyverno panics; any error will do.
		if got.Error == "" {
			t.Errorf("%s: Kyverno fails (%s), Arbiter returns %+v", name, want.Error, got)
		}
	case want.Error != "" || got.Error != "":
		if want.Error != got.Error {
			t.Errorf("%s: error\n got: %q\nwant: %q", name, got.Error, want.Error)
		}
	case want.Null != got.Null:
		t.Errorf("%s: null=%v, want %v (%+v)", name, got.Null, want.Null, got)
	case want.String != got.String:
		t.Errorf("%s: value %q, want %q", name, got.String, want.String)
	case !reflect.DeepEqual(want.Value, got.Value):
		w, _ := json.Marshal(want.Value)
		g, _ := json.Marshal(got.Value)
		t.Errorf("%s: value\n got: %s\nwant: %s", name, g, w)
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// fillOracle records a value as the oracle does: as JSON when cel-go can
// convert it, else as "<type>:<value>".
func fillOracle(r *oracleResult, val ref.Val) {
	if val == types.NullValue {
		r.Null = true
		return
	}
	if pb, err := val.ConvertToNative(reflect.TypeOf(&structpb.Value{})); err == nil {
		if raw, err := protojson.Marshal(pb.(*structpb.Value)); err == nil {
			var v any
			_ = json.Unmarshal(raw, &v)
			r.Value = v
			return
		}
	}
	r.String = fmt.Sprintf("%s:%v", val.Type().TypeName(), val.Value())
}
