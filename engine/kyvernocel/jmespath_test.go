package kyvernocel

import (
	"encoding/json"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestJMESPath(t *testing.T) {
	raw, err := os.ReadFile("testdata/jmespath/cases.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var groups []struct {
		Data  any `json:"data"`
		Cases []struct {
			Expr      string `json:"expr"`
			Want      any    `json:"want"`
			WantError any    `json:"wantError"` // true, or a text the error contains
		} `json:"cases"`
	}
	if err := yaml.UnmarshalStrict(raw, &groups); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range groups {
		for _, tc := range g.Cases {
			n++
			got, err := jmespathSearch(tc.Expr, g.Data)
			if tc.WantError != nil {
				if err == nil {
					t.Errorf("%s: %v, want an error", tc.Expr, got)
				} else if want, ok := tc.WantError.(string); ok && !strings.Contains(err.Error(), want) {
					t.Errorf("%s: error %q, want it to contain %q", tc.Expr, err, want)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s: %v", tc.Expr, err)
				continue
			}
			if !reflect.DeepEqual(got, tc.Want) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(tc.Want)
				t.Errorf("%s: %s, want %s", tc.Expr, g, w)
			}
		}
	}
	if n < 50 {
		t.Fatalf("only %d cases", n)
	}
}

// TestJMESPathAvgEmpty pins the library's avg of an empty array: NaN (the
// specification says null), as in Kyverno.
func TestJMESPathAvgEmpty(t *testing.T) {
	v, err := jmespathSearch("avg(@)", []any{})
	if f, ok := v.(float64); err != nil || !ok || !math.IsNaN(f) {
		t.Fatalf("avg([]) = %v, %v; want NaN", v, err)
	}
}

func FuzzJMESPath(f *testing.F) {
	for _, s := range []string{"contains(`[[1]]`, `[1]`)", "a.b[0]", "people[?age > `25`].first | sort(@)", "[::-1]", "{a: b, c: [d, e]}", "&x", "`{\"a\": [1]}`"} {
		f.Add(s)
	}
	data := map[string]any{"a": map[string]any{"b": []any{1.0, "x"}}, "people": []any{map[string]any{"age": 30.0, "first": "J"}}}
	f.Fuzz(func(t *testing.T, expr string) {
		_, _ = jmespathSearch(expr, data) // must not panic: the library's panics are errors
	})
}
