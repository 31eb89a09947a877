package jsonenc

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestAppendValueMatchesMarshal compares AppendValue with encoding/json on
// random JSON-shaped values: nested maps and lists (nil and empty too),
// strings needing escapes (HTML, control characters, invalid UTF-8,
// U+2028), integers and floats across their ranges, and a value of
// another type (the fallback); and the error for NaN.
func TestAppendValueMatchesMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pieces := []string{"", "a", "<b>", "x&y", "\"q\"", "back\\slash", "\n\t\r\b\f\x01\x1f\x7f", "\xff\xfe", "\u2028\u2029", "日本", "key"}
	str := func() string {
		s := ""
		for range rng.IntN(3) {
			s += pieces[rng.IntN(len(pieces))]
		}
		return s
	}
	floats := []float64{0, math.Copysign(0, -1), 1, -1.5, 1e-7, 1e-6, 123456789.125, 1e20, 1e21, 1e300, -2.5e-10, math.SmallestNonzeroFloat64, math.MaxFloat64}
	var gen func(depth int) any
	gen = func(depth int) any {
		switch k := rng.IntN(10); {
		case k == 0:
			return nil
		case k == 1:
			return rng.IntN(2) == 0
		case k == 2:
			return str()
		case k == 3:
			return rng.Int64() - rng.Int64()
		case k == 4:
			if rng.IntN(2) == 0 {
				return floats[rng.IntN(len(floats))]
			}
			return math.Float64frombits(rng.Uint64()&^(0x7ff<<52) | uint64(rng.IntN(2046)+1)<<52)
		case k == 5:
			return 42 // an int: the fallback
		case k < 8 && depth < 4:
			if rng.IntN(8) == 0 {
				return map[string]any(nil)
			}
			m := map[string]any{}
			for range rng.IntN(5) {
				m[str()] = gen(depth + 1)
			}
			return m
		case depth < 4:
			if rng.IntN(8) == 0 {
				return []any(nil)
			}
			l := []any{}
			for range rng.IntN(5) {
				l = append(l, gen(depth+1))
			}
			return l
		}
		return str()
	}
	for i := range 5000 {
		v := gen(0)
		want, werr := json.Marshal(v)
		got, err := AppendValue(nil, v)
		if (err == nil) != (werr == nil) {
			t.Fatalf("value %d: error %v, encoding/json %v", i, err, werr)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("value %d:\n got %s\nwant %s", i, got, want)
		}
		// Indented, as json.Indent indents json.Marshal's.
		prefix, indent := []string{"", "  ", "\t>"}[i%3], []string{"  ", "\t", ""}[i/3%3]
		gotIndent, err := AppendIndent([]byte("x"), v, prefix, indent)
		if (err == nil) != (werr == nil) {
			t.Fatalf("value %d: AppendIndent error %v, encoding/json %v", i, err, werr)
		}
		if err == nil {
			wantIndent := bytes.Buffer{}
			wantIndent.WriteString("x")
			if err := json.Indent(&wantIndent, want, prefix, indent); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(gotIndent, wantIndent.Bytes()) {
				t.Fatalf("value %d, prefix %q, indent %q:\n got %s\nwant %s", i, prefix, indent, gotIndent, wantIndent.Bytes())
			}
		}
	}
	if _, err := AppendValue(nil, map[string]any{"x": math.NaN()}); err == nil {
		t.Fatal("NaN encoded")
	}
}

// TestAppendStringWithoutHTMLEscaping compares AppendString(…, false) with
// a json.Encoder that does not escape HTML.
func TestAppendStringWithoutHTMLEscaping(t *testing.T) {
	for _, s := range []string{"", "<a&b>", "\"q\"\\", "\n\t\x01\x7f", "\xff", "\u2028x\u2029", "日本"} {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if got := AppendString(nil, s, false); string(got) != strings.TrimSuffix(want.String(), "\n") {
			t.Errorf("%q: got %s, want %s", s, got, want.String())
		}
	}
}

// benchObject is a Pod as a MutatingPolicy leaves it.
func benchObject(b *testing.B) any {
	var v any
	if err := json.Unmarshal([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"shop","labels":{"app":"web","team":"unassigned","app.kubernetes.io/managed-by":"arbiter"},"annotations":{"cluster-autoscaler.kubernetes.io/safe-to-evict":"true","cost-center":"shared"}},"spec":{"terminationGracePeriodSeconds":30,"securityContext":{"runAsNonRoot":true,"seccompProfile":{"type":"RuntimeDefault"}},"containers":[{"name":"web","image":"registry.example.com/web:1.2.3","imagePullPolicy":"IfNotPresent","ports":[{"containerPort":8080,"protocol":"TCP"}],"securityContext":{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}},"resources":{"requests":{"cpu":"100m","memory":"128Mi"}}}],"volumes":[{"name":"tmp","emptyDir":{}}]}}`), &v); err != nil {
		b.Fatal(err)
	}
	return v
}

func BenchmarkAppendIndent(b *testing.B) {
	v := benchObject(b)
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		buf, _ = AppendIndent(buf[:0], v, "  ", "  ")
	}
}

func BenchmarkAppendValueThenIndent(b *testing.B) {
	v := benchObject(b)
	b.ReportAllocs()
	var buf []byte
	var out bytes.Buffer
	for b.Loop() {
		buf, _ = AppendValue(buf[:0], v)
		out.Reset()
		_ = json.Indent(&out, buf, "  ", "  ")
	}
}

// FuzzAppendString compares AppendString with encoding/json, with and
// without HTML escaping, on any string.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain ascii text of some length", "registry.example.com/web:1.2.3", "0123456\"89abcdef",
		"0123456789\\bcdef", "abcdefg<ijklmnop", "abcdefgh>", "x&yyyyyyyyyyyyyy", "\x1fabcdefghijklmno", "abcdefgh\x7f\x80",
		"日本語のテキストです", "\u2028abcdefgh\u2029", "\xff\xfeabcdefghijkl", "aaaaaaa\x00", " !#$%&'()*+,-./09:;=?@AZ[]^_`az{|}~"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendString([]byte("x"), s, true); string(got) != "x"+string(want) {
			t.Fatalf("%q: got %s, want %s", s, got[1:], want)
		}
		var noHTML bytes.Buffer
		enc := json.NewEncoder(&noHTML)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if got := AppendString(nil, s, false); string(got) != strings.TrimSuffix(noHTML.String(), "\n") {
			t.Fatalf("%q without HTML escaping: got %s, want %s", s, got, noHTML.String())
		}
	})
}
