package kyvernocel

import (
	"encoding/json"
	"os"
	"reflect"
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
			WantError bool   `json:"wantError"`
		} `json:"cases"`
	}
	if err := yaml.UnmarshalStrict(raw, &groups); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range groups {
		for _, tc := range g.Cases {
			n++
			got, err := jpSearch(tc.Expr, g.Data)
			if tc.WantError {
				if err == nil {
					t.Errorf("%s: %v, want an error", tc.Expr, got)
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

func FuzzJMESPath(f *testing.F) {
	for _, s := range []string{"a.b[0]", "people[?age > `25`].first | sort(@)", "[::-1]", "{a: b, c: [d, e]}", "&x", "`{\"a\": [1]}`"} {
		f.Add(s)
	}
	data := map[string]any{"a": map[string]any{"b": []any{1.0, "x"}}, "people": []any{map[string]any{"age": 30.0, "first": "J"}}}
	f.Fuzz(func(t *testing.T, expr string) {
		_, _ = jpSearch(expr, data) // must not panic
	})
}
