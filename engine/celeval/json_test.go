package celeval

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types/ref"

	"github.com/arbiter-pdp/arbiter/engine/jsonval"
)

// jsonObject is the `object` the generated expressions read: numbers at
// the edges of what converts to an int64, nested nulls and empty
// containers, typed nil containers.
func jsonObject() map[string]any {
	return map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata": map[string]any{
			"name":   "p",
			"labels": map[string]any{"app": "web", "a/b": "é\u2028<&>"},
		},
		"spec": map[string]any{
			"replicas":   int64(3),
			"big":        int64(1) << 60,
			"safe":       int64(1)<<53 - 1,
			"unsafe":     int64(1) << 53,
			"min":        int64(math.MinInt64),
			"one":        float64(1),
			"half":       1.5,
			"huge":       1e21,
			"edge":       9.2233720368547758e18,
			"negzero":    math.Copysign(0, -1),
			"nan":        math.NaN(),
			"null":       nil,
			"nilmap":     map[string]any(nil),
			"nillist":    []any(nil),
			"empty":      map[string]any{},
			"emptylist":  []any{},
			"containers": []any{map[string]any{"name": "c", "ports": []any{int64(80), 1.5, nil, true, "x"}}},
			"weird":      []any{int32(1)},
		},
	}
}

// exprGen builds CEL expressions from fuzz bytes.
type exprGen struct {
	b     []byte
	depth int
}

func (g *exprGen) pick(n int) int {
	if len(g.b) == 0 {
		return 0
	}
	c := g.b[0]
	g.b = g.b[1:]
	return int(c) % n
}

var exprLeaves = []string{
	"0", "1", "-1", "9007199254740991", "9007199254740992", "-9007199254740991", "-9007199254740993",
	"9223372036854775807", "-9223372036854775808",
	"0u", "9007199254740991u", "9007199254740992u", "18446744073709551615u",
	"0.0", "-0.0", "1.5", "1e20", "1e21", "1e300", "9.2233720368547758e18", "-9.2233720368547758e18",
	"0.0/0.0", "1.0/0.0", "-1.0/0.0", "2.0",
	`"a"`, `""`, `"é"`, `"\u2028<&>"`, "true", "false", "null", `b"x"`,
	`timestamp("2024-01-01T00:00:00Z")`, `duration("1s")`, "int", "dyn(1)",
	"object", "object.metadata", "object.metadata.labels", "object.spec", "object.spec.containers",
	"object.spec.containers[0]", "object.spec.containers[0].ports", "object.spec.big", "object.spec.one",
	"object.spec.nan", "object.spec.null", "object.spec.nilmap", "object.spec.nillist", "object.spec.weird",
	"object.spec.edge", "object.spec.unsafe", "object.spec.min", "object.spec.negzero",
	"object.spec.containers.map(c, c.name)", "object.spec.containers.map(c, c)",
	"[1, 2].map(x, x * 2)", "{'a': 1}.map(k, k)",
}

func (g *exprGen) expr() string {
	g.depth++
	defer func() { g.depth-- }()
	if g.depth > 4 {
		return exprLeaves[g.pick(len(exprLeaves))]
	}
	switch g.pick(8) {
	case 0, 1, 2:
		return exprLeaves[g.pick(len(exprLeaves))]
	case 3:
		n := g.pick(4)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = g.expr()
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case 4:
		n := g.pick(4)
		parts := make([]string, n)
		keys := []string{`"a"`, `"b"`, `"a/b"`, `""`, "1", "true", "dyn('c')", "2u"}
		for i := range parts {
			parts[i] = keys[g.pick(len(keys))] + ": " + g.expr()
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case 5:
		return "[" + g.expr() + "] + [" + g.expr() + "]"
	case 6:
		return "dyn(" + g.expr() + ")"
	default:
		return "{'k': " + g.expr() + "}"
	}
}

var toJSONSeeds = []string{
	"", "\x03\x01\x05", "\x04\x03\x00\x00\x01\x05\x02\x10", "\x05\x00\x30\x00\x31", "\x00\x38", "\x00\x3b",
	"\x03\x03\x00\x26\x00\x27\x00\x28", "\x04\x02\x07\x00\x01\x00\x02", "\x06\x00\x37", "\x00\x40",
}

// FuzzToJSON checks the direct conversion of CEL values to JSON-shaped data
// against the conversion through protobuf Values it stands for: the same
// data, or the same error.
func FuzzToJSON(f *testing.F) {
	for _, s := range toJSONSeeds {
		f.Add([]byte(s))
	}
	env, err := cel.NewEnv(cel.Variable("object", cel.DynType))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		g := &exprGen{b: b}
		src := g.expr()
		ast, iss := env.Compile(src)
		if iss.Err() != nil {
			return
		}
		prg, err := env.Program(ast)
		if err != nil {
			return
		}
		val, _, err := prg.Eval(map[string]any{"object": jsonval.NewMap(jsonObject())})
		if err != nil {
			return
		}
		checkToJSON(t, src, val)
	})
}

// checkToJSON compares the direct conversion of val, when there is one,
// with the protobuf one (where there is none, ToJSON is the protobuf one,
// whose errors may differ from run to run with the order of map entries).
func checkToJSON(t *testing.T, src string, val ref.Val) {
	t.Helper()
	got, ok := toJSONDirect(val)
	if !ok {
		return
	}
	want, err := toJSONProto(val)
	if err != nil {
		t.Fatalf("%s: converted directly to %#v, through protobuf: %v", src, got, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\nToJSON          %#v\nthrough protobuf %#v", src, got, want)
	}
}

// TestToJSONDirect runs the fuzz seeds and every leaf, alone and nested.
func TestToJSONDirect(t *testing.T) {
	env, err := cel.NewEnv(cel.Variable("object", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	direct := 0
	for _, leaf := range exprLeaves {
		for _, src := range []string{leaf, "[" + leaf + "]", "{'k': " + leaf + ", 'l': [" + leaf + ", 1]}", "dyn([" + leaf + "]) + [" + leaf + "]"} {
			ast, iss := env.Compile(src)
			if iss.Err() != nil {
				continue
			}
			prg, err := env.Program(ast)
			if err != nil {
				t.Fatal(err)
			}
			val, _, err := prg.Eval(map[string]any{"object": jsonval.NewMap(jsonObject())})
			if err != nil {
				continue
			}
			if _, ok := toJSONDirect(val); ok {
				direct++
			}
			checkToJSON(t, src, val)
		}
	}
	if direct < 100 {
		t.Fatalf("only %d values converted directly", direct)
	}
}
