package report

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// TestAppendJSONMatchesEncoding compares AppendJSON with encoding/json on
// reports of every shape: optional fields set or not, nil and empty
// results, maps, and strings that need escaping (quotes, control
// characters, HTML characters, invalid UTF-8, U+2028).
func TestAppendJSONMatchesEncoding(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	pieces := []string{"", "a", "pod-1", "\"q\"", "back\\slash", "line\nbreak\ttab\r", "\b\f\x01\x1f\x7f",
		"<a&b>", "\xff\xfe invalid", "sep\u2028\u2029", "ünïcødé 日本", "Policy x failed: y; z"}
	s := func() string {
		out := ""
		for range rng.IntN(3) {
			out += pieces[rng.IntN(len(pieces))]
		}
		return out
	}
	strMap := func() map[string]string {
		switch rng.IntN(3) {
		case 0:
			return nil
		case 1:
			return map[string]string{}
		}
		m := map[string]string{}
		for range 1 + rng.IntN(4) {
			m[s()] = s()
		}
		return m
	}
	cache := &ResultCache{}
	for i := range 2000 {
		r := Report{APIVersion: s(), Kind: s(), Metadata: Metadata{Name: s(), Namespace: s(), Labels: strMap()}}
		if rng.IntN(2) == 0 {
			r.Scope = &Scope{APIVersion: s(), Kind: s(), Name: s(), Namespace: s()}
		}
		switch rng.IntN(4) {
		case 0:
			r.Results = nil
		case 1:
			r.Results = []Result{}
		default:
			for range 1 + rng.IntN(5) {
				r.Results = append(r.Results, Result{Policy: s(), Rule: s(), Result: s(), Message: s(), Properties: strMap(),
					Source: s(), Scored: rng.IntN(2) == 0, Category: s(), Severity: s()})
			}
		}
		r.Summary = Summary{Pass: rng.IntN(20), Fail: rng.IntN(3), Warn: rng.IntN(3), Error: rng.IntN(2), Skip: rng.IntN(2)}
		prefix := []string{"", "  "}[rng.IntN(2)]

		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetIndent(prefix, "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(&r); err != nil {
			t.Fatal(err)
		}
		got := r.AppendJSON(nil, prefix)
		if w := bytes.TrimSuffix(want.Bytes(), []byte("\n")); !bytes.Equal(got, w) {
			t.Fatalf("report %d: AppendJSON\n%s\nencoding/json\n%s", i, got, w)
		}
		// With the cache shared by every report (past its bound after a
		// while), twice: results written, then taken from the cache.
		for range 2 {
			if cached := r.AppendJSONCached(nil, prefix, cache); !bytes.Equal(cached, got) {
				t.Fatalf("report %d: AppendJSONCached\n%s\nAppendJSON\n%s", i, cached, got)
			}
		}
	}
}

func BenchmarkAppendJSON(b *testing.B) {
	r := New("v1", "Pod", "bench", "pod", true, nil)
	for range 16 {
		r.Results = append(r.Results, Result{Policy: "disallow-capabilities", Result: "pass", Message: "success",
			Properties: map[string]string{"process": "background scan"}, Source: "KyvernoValidatingPolicy", Scored: true,
			Category: "Pod Security Standards (Baseline) in ValidatingPolicy", Severity: "medium"})
	}
	buf := make([]byte, 0, 16<<10)
	b.Run("uncached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = r.AppendJSON(buf[:0], "  ")
		}
		b.SetBytes(int64(len(buf)))
	})
	b.Run("cached", func(b *testing.B) {
		cache := &ResultCache{}
		b.ReportAllocs()
		for b.Loop() {
			buf = r.AppendJSONCached(buf[:0], "  ", cache)
		}
		b.SetBytes(int64(len(buf)))
	})
}
