package patch

import (
	"math"
	"strconv"
)

// gen turns fuzz bytes into choices (zeros once they run out), so the
// fuzzer mutates patches through the choices it makes.
type gen struct{ b []byte }

func (g *gen) byte() byte {
	if len(g.b) == 0 {
		return 0
	}
	c := g.b[0]
	g.b = g.b[1:]
	return c
}

func (g *gen) intn(n int) int { return int(g.byte()) % n }

// pointers lists every JSON Pointer into v (escaped), in a stable order.
func pointers(v any) []string {
	var out []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		out = append(out, prefix)
		switch t := v.(type) {
		case map[string]any:
			for _, k := range sortedKeys(t) {
				walk(prefix+"/"+EscapeToken(k), t[k])
			}
		case []any:
			for i, e := range t {
				walk(prefix+"/"+strconv.Itoa(i), e)
			}
		}
	}
	walk("", v)
	return out
}

// lookup is the value at an escaped pointer of v, if any (standard
// semantics, no negative indexes).
func lookup(v any, ptr string) (any, bool) {
	if ptr == "" {
		return v, true
	}
	p := parsePath(ptr)
	for {
		tok, last := p.next()
		key := unescape(tok)
		switch t := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = t[key]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(key)
			if err != nil || i < 0 || i >= len(t) {
				return nil, false
			}
			v = t[i]
		default:
			return nil, false
		}
		if last {
			return v, true
		}
	}
}

var tokens = []string{
	"new", "-", "0", "1", "2", "-1", "-2", "99", "", "~", "~0", "~1", "a~1b", "~2", "+0", "01",
	"x/y", "\x01", "é", "<&>", "\u2028", "labels", "app.kubernetes.io~1name", "\xff", "\U0001F600", "\U000E0001",
}

// path picks a pointer: mostly one of the document's, sometimes changed.
func (g *gen) path(doc any) string {
	ptrs := pointers(doc)
	p := ptrs[(int(g.byte())<<8|int(g.byte()))%len(ptrs)]
	switch g.intn(20) {
	case 0, 1, 2:
		p += "/" + tokens[g.intn(len(tokens))]
	case 3:
		if i := lastSlash(p); i >= 0 {
			p = p[:i+1] + tokens[g.intn(len(tokens))]
		}
	case 4:
		if p != "" {
			p = p[1:] // no leading slash
		}
	case 5:
		p = "x" + p
	case 6:
		p = ""
	case 7:
		if i := lastSlash(p); i >= 0 {
			p = p[:i] // the parent
		}
	}
	return p
}

func lastSlash(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			return i
		}
	}
	return -1
}

// value picks a value: scalars, containers with nulls, a subtree of the
// document itself (shared, not copied), or the twin of a number.
func (g *gen) value(doc any) any {
	switch g.intn(24) {
	case 0:
		return nil
	case 1:
		return NoValue{}
	case 2:
		return int64(1)
	case 3:
		return float64(1)
	case 4:
		return 1.5
	case 5:
		return "nginx:1.27"
	case 6:
		return "a<b&c>"
	case 7:
		return ""
	case 8:
		return true
	case 9:
		return map[string]any{}
	case 10:
		return []any{}
	case 11:
		return []any{nil}
	case 12:
		return map[string]any{"a": nil}
	case 13:
		return map[string]any{"k": "v", "n": int64(2), "l": []any{int64(1), 2.5, "x"}}
	case 14:
		return []any{map[string]any{"name": "c", "image": "busybox"}, map[string]any{}}
	case 15:
		return int64(9007199254740993)
	case 16:
		return float64(9007199254740992)
	case 17:
		return 0.0
	case 18:
		return math.Copysign(0, -1)
	case 19, 20, 21:
		v, _ := lookup(doc, g.path(doc))
		return v
	case 22:
		v, _ := lookup(doc, g.path(doc))
		return twin(v)
	}
	return map[string]any{"a~b/c": map[string]any{"d": []any{nil, "e"}}}
}

// twin is a value equal as JSON but of another Go type (int64 ↔ float64),
// deep.
func twin(v any) any {
	switch t := v.(type) {
	case int64:
		return float64(t)
	case float64:
		if t == math.Trunc(t) && math.Abs(t) < 1<<53 {
			return int64(t)
		}
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[k] = twin(e)
		}
		return m
	case []any:
		s := make([]any, len(t))
		for i, e := range t {
			s[i] = twin(e)
		}
		return s
	}
	return v
}

var (
	opKinds    = []string{"add", "add", "add", "remove", "replace", "replace", "move", "copy", "test", "test"}
	oddOpKinds = []string{"ADD", "", "add\x01", "unknown"}
)

// ops generates 1 to 5 operations against doc (mostly few). Each picks its
// paths and values in the document as the operations before it left it
// (as far as they apply), so that operations reach into added values.
func (g *gen) ops(doc map[string]any) []Op {
	n := 1 + g.intn(5)
	if g.intn(2) == 0 {
		n = 1 + g.intn(2)
	}
	ops := make([]Op, 0, n)
	var cur any = doc
	for range n {
		op := g.op(cur)
		ops = append(ops, op)
		if m, ok := cur.(map[string]any); ok {
			if next, err := ApplyJSONPatch(m, []Op{op}); err == nil {
				cur = next
			}
		}
	}
	return ops
}

func (g *gen) op(doc any) Op {
	kind := opKinds[g.intn(len(opKinds))]
	if g.intn(32) == 0 {
		kind = oddOpKinds[g.intn(len(oddOpKinds))]
	}
	op := Op{Op: kind, Path: g.path(doc), Value: NoValue{}}
	switch op.Op {
	case "add", "replace", "ADD":
		op.Value = g.value(doc)
	case "test":
		// Mostly the value there, so that tests pass as often as not.
		switch g.intn(4) {
		case 0, 1:
			if v, ok := lookup(doc, op.Path); ok {
				op.Value = v
			}
		case 2:
			if v, ok := lookup(doc, op.Path); ok {
				op.Value = twin(v)
			}
		default:
			op.Value = g.value(doc)
		}
	case "move", "copy":
		if g.intn(8) != 0 {
			op.From = g.path(doc)
		}
	}
	return op
}

// data is a value for a document (never NoValue).
func (g *gen) data() any {
	if v := g.value(nil); v != (NoValue{}) {
		return v
	}
	return nil
}

// mutate changes a deep copy of v in place at random (set, delete, insert,
// remove, retype), with no help from the package, for Diff's tests.
func (g *gen) mutate(v any, depth int) any {
	switch t := v.(type) {
	case map[string]any:
		keys := sortedKeys(t)
		for range 1 + g.intn(3) {
			switch g.intn(6) {
			case 0:
				if len(keys) > 0 {
					delete(t, keys[g.intn(len(keys))])
				}
			case 1:
				t[tokens[g.intn(len(tokens))]] = g.data()
			case 2, 3, 4:
				if len(keys) > 0 && depth < 8 {
					k := keys[g.intn(len(keys))]
					if _, ok := t[k]; ok {
						t[k] = g.mutate(t[k], depth+1)
					}
				}
			default:
				if len(keys) > 0 {
					k := keys[g.intn(len(keys))]
					t[k] = twin(t[k])
				}
			}
		}
		return t
	case []any:
		switch g.intn(6) {
		case 0:
			if len(t) > 0 {
				i := g.intn(len(t))
				return append(t[:i:i], t[i+1:]...)
			}
		case 1:
			i := g.intn(len(t) + 1)
			s := append(t[:i:i], g.data())
			return append(s, t[i:]...)
		case 2:
			if len(t) > 1 { // rotate
				return append(append([]any(nil), t[1:]...), t[0])
			}
		default:
			if len(t) > 0 && depth < 8 {
				i := g.intn(len(t))
				t[i] = g.mutate(t[i], depth+1)
			}
		}
		return t
	}
	switch g.intn(3) {
	case 0:
		return g.data()
	case 1:
		return twin(v)
	}
	return v
}
