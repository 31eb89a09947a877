package report

import (
	"bytes"
	"maps"
	"reflect"
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
// manifest to the next). It holds at most maxCachedResults results, at most
// maxCachedPerPolicy of one policy, and is safe for concurrent use.
type ResultCache struct {
	m sync.Map // policy → *policyResults
	n atomic.Int32
}

const (
	maxCachedResults   = 4096
	maxCachedPerPolicy = 16
	// Results with longer messages are not cached.
	maxCachedMessage = 1024
)

// policyResults are the cached results of one policy: a few (a pass, a
// fail or two), looked up by comparison.
type policyResults struct {
	mu   sync.Mutex
	list atomic.Pointer[[]cachedResult] // replaced, never modified
}

// cachedResult is a result (but its policy) and its JSON.
type cachedResult struct {
	prefix, rule, result, message, source, category, severity string
	scored                                                    bool
	props                                                     map[string]string
	js                                                        []byte
}

func (c *cachedResult) matches(prefix string, res *Result) bool {
	return c.message == res.Message && c.result == res.Result && c.prefix == prefix && c.rule == res.Rule &&
		c.source == res.Source && c.category == res.Category && c.severity == res.Severity && c.scored == res.Scored &&
		sameProperties(c.props, res.Properties)
}

// sameProperties compares properties, at once when they are the same map
// (results share read-only properties maps).
func sameProperties(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer() {
		return true
	}
	return maps.Equal(a, b)
}

// lookup returns the JSON of a result seen before.
func (c *ResultCache) lookup(prefix string, res *Result) ([]byte, bool) {
	v, ok := c.m.Load(res.Policy)
	if !ok {
		return nil, false
	}
	if list := v.(*policyResults).list.Load(); list != nil {
		for i := range *list {
			if e := &(*list)[i]; e.matches(prefix, res) {
				return e.js, true
			}
		}
	}
	return nil, false
}

// add remembers the JSON of a result, while the cache has room.
func (c *ResultCache) add(prefix string, res *Result, js []byte) {
	if len(res.Message) > maxCachedMessage || c.n.Load() >= maxCachedResults {
		return
	}
	v, _ := c.m.LoadOrStore(res.Policy, &policyResults{})
	pr := v.(*policyResults)
	pr.mu.Lock()
	defer pr.mu.Unlock()
	var list []cachedResult
	if old := pr.list.Load(); old != nil {
		list = *old
	}
	if len(list) >= maxCachedPerPolicy {
		return
	}
	for i := range list {
		if list[i].matches(prefix, res) {
			return // added meanwhile
		}
	}
	next := append(slices.Clip(list), cachedResult{prefix: prefix, rule: res.Rule, result: res.Result, message: res.Message,
		source: res.Source, category: res.Category, severity: res.Severity, scored: res.Scored, props: res.Properties,
		js: bytes.Clone(js)})
	pr.list.Store(&next)
	c.n.Add(1)
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
			if cache != nil {
				if js, ok := cache.lookup(prefix, res); ok {
					w.b = append(w.b, js...)
					continue
				}
			}
			start := len(w.b)
			w.result(res)
			if cache != nil {
				cache.add(prefix, res, w.b[start:])
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
