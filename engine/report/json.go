package report

import (
	"bytes"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/arbiter-pdp/arbiter/internal/jsonenc"
)

// AppendJSON appends r as encoding/json writes it with MarshalIndent(r,
// prefix, "  ") and HTML escaping off (json.Encoder.SetEscapeHTML(false)):
// the same bytes, without reflection — batch output of many reports spends
// most of its time there otherwise. TestAppendJSONMatchesEncoding checks it.
func (r *Report) AppendJSON(b []byte, prefix string) []byte {
	return r.AppendJSONCached(b, prefix, nil)
}

// ResultCache remembers the JSON of report results, for runs that encode
// the same results again and again (a batch of similar manifests: most of
// a report's bytes are its results, and most results repeat from one
// manifest to the next). It holds at most maxCachedResults results and is
// safe for concurrent use.
type ResultCache struct {
	m sync.Map // resultKey → []byte
	n atomic.Int32
}

const (
	maxCachedResults = 4096
	// Results with longer messages, or more properties, are not cached.
	maxCachedMessage    = 1024
	maxCachedProperties = 3
)

// resultKey is everything a result's JSON depends on.
type resultKey struct {
	prefix                                                 string
	policy, rule, result, message, source, category, sever string
	scored                                                 bool
	nprops                                                 int
	props                                                  [maxCachedProperties][2]string
}

func cacheKey(prefix string, res *Result) (resultKey, bool) {
	if len(res.Properties) > maxCachedProperties || len(res.Message) > maxCachedMessage {
		return resultKey{}, false
	}
	k := resultKey{prefix: prefix, policy: res.Policy, rule: res.Rule, result: res.Result, message: res.Message,
		source: res.Source, category: res.Category, sever: res.Severity, scored: res.Scored, nprops: len(res.Properties)}
	i := 0
	for pk, pv := range res.Properties {
		k.props[i] = [2]string{pk, pv}
		i++
	}
	// Sorted, so that equal maps make equal keys.
	for a := 1; a < i; a++ {
		for b := a; b > 0 && k.props[b][0] < k.props[b-1][0]; b-- {
			k.props[b], k.props[b-1] = k.props[b-1], k.props[b]
		}
	}
	return k, true
}

// AppendJSONCached is AppendJSON taking the JSON of results seen before
// from cache (nil: none), and adding the others to it.
func (r *Report) AppendJSONCached(b []byte, prefix string, cache *ResultCache) []byte {
	w := jsonWriter{b: b, prefix: prefix}
	w.open('{')
	w.key("apiVersion")
	w.str(r.APIVersion)
	w.key("kind")
	w.str(r.Kind)
	w.key("metadata")
	w.open('{')
	w.key("name")
	w.str(r.Metadata.Name)
	if r.Metadata.Namespace != "" {
		w.key("namespace")
		w.str(r.Metadata.Namespace)
	}
	if len(r.Metadata.Labels) > 0 {
		w.key("labels")
		w.strMap(r.Metadata.Labels)
	}
	w.close('}')
	if r.Scope != nil {
		w.key("scope")
		w.open('{')
		w.key("apiVersion")
		w.str(r.Scope.APIVersion)
		w.key("kind")
		w.str(r.Scope.Kind)
		w.key("name")
		w.str(r.Scope.Name)
		if r.Scope.Namespace != "" {
			w.key("namespace")
			w.str(r.Scope.Namespace)
		}
		w.close('}')
	}
	w.key("results")
	switch {
	case r.Results == nil:
		w.b = append(w.b, "null"...)
	case len(r.Results) == 0:
		w.b = append(w.b, "[]"...)
	default:
		w.open('[')
		for i := range r.Results {
			res := &r.Results[i]
			w.elem()
			var key resultKey
			cacheable := false
			if cache != nil {
				if key, cacheable = cacheKey(prefix, res); cacheable {
					if js, ok := cache.m.Load(key); ok {
						w.b = append(w.b, js.([]byte)...)
						continue
					}
				}
			}
			start := len(w.b)
			w.result(res)
			if cacheable && cache.n.Load() < maxCachedResults {
				if _, loaded := cache.m.LoadOrStore(key, bytes.Clone(w.b[start:])); !loaded {
					cache.n.Add(1)
				}
			}
		}
		w.close(']')
	}
	w.key("summary")
	w.open('{')
	for _, c := range [...]struct {
		k string
		n int
	}{{"pass", r.Summary.Pass}, {"fail", r.Summary.Fail}, {"warn", r.Summary.Warn}, {"error", r.Summary.Error}, {"skip", r.Summary.Skip}} {
		w.key(c.k)
		w.b = strconv.AppendInt(w.b, int64(c.n), 10)
	}
	w.close('}')
	w.close('}')
	return w.b
}

// result writes one result, at the depth of the results' array elements.
func (w *jsonWriter) result(res *Result) {
	w.open('{')
	w.key("policy")
	w.str(res.Policy)
	w.key("rule")
	w.str(res.Rule)
	w.key("result")
	w.str(res.Result)
	if res.Message != "" {
		w.key("message")
		w.str(res.Message)
	}
	if len(res.Properties) > 0 {
		w.key("properties")
		w.strMap(res.Properties)
	}
	if res.Source != "" {
		w.key("source")
		w.str(res.Source)
	}
	w.key("scored")
	w.b = strconv.AppendBool(w.b, res.Scored)
	if res.Category != "" {
		w.key("category")
		w.str(res.Category)
	}
	if res.Severity != "" {
		w.key("severity")
		w.str(res.Severity)
	}
	w.close('}')
}

// jsonWriter writes indented JSON: after open, each key or elem starts a
// new line at the depth; close ends the container on its own line.
type jsonWriter struct {
	b      []byte
	prefix string
	depth  int
	// first is set after open, until the first member.
	first bool
}

func (w *jsonWriter) open(c byte) {
	w.b = append(w.b, c)
	w.depth++
	w.first = true
}

func (w *jsonWriter) close(c byte) {
	w.depth--
	w.newline()
	w.b = append(w.b, c)
	w.first = false
}

const spaces = "                                                                "

func (w *jsonWriter) newline() {
	w.b = append(w.b, '\n')
	w.b = append(w.b, w.prefix...)
	n := 2 * w.depth
	for n > len(spaces) {
		w.b = append(w.b, spaces...)
		n -= len(spaces)
	}
	w.b = append(w.b, spaces[:n]...)
}

// elem starts a member of an array or object.
func (w *jsonWriter) elem() {
	if !w.first {
		w.b = append(w.b, ',')
	}
	w.first = false
	w.newline()
}

func (w *jsonWriter) key(k string) {
	w.elem()
	w.b = jsonenc.AppendString(w.b, k, false)
	w.b = append(w.b, ':', ' ')
}

func (w *jsonWriter) str(s string) { w.b = jsonenc.AppendString(w.b, s, false) }

func (w *jsonWriter) strMap(m map[string]string) {
	if len(m) == 1 {
		for k, v := range m {
			w.open('{')
			w.key(k)
			w.str(v)
			w.close('}')
		}
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	w.open('{')
	for _, k := range keys {
		w.key(k)
		w.str(m[k])
	}
	w.close('}')
}
