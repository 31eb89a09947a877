package patch

import (
	"slices"
	"strconv"
	"strings"

	"github.com/arbiter-pdp/arbiter/internal/jsonenc"
)

// Diff returns a JSON Patch that turns from into to: add, remove and replace
// operations with escaped paths, in a deterministic order. It descends into
// objects (members in sorted key order: removed, changed and added ones) and
// arrays (after their common prefix and suffix, element by element, then the
// added elements in order or the removed ones from the last); a value whose
// type changes is replaced (an array of the same length is diffed element
// by element). Values are compared as Equal compares them, and
// subtrees that from and to share (as ApplyJSONPatch's result shares them
// with its input) are skipped without being walked. A nil map is an empty
// object. The operations' values are to's, not copies.
func Diff(from, to map[string]any) []Op {
	d := differ{path: make([]byte, 0, 64)}
	d.object(from, to)
	return d.ops
}

type differ struct {
	ops  []Op
	path []byte
	keys []string
}

func (d *differ) at(tok string) int {
	n := len(d.path)
	d.path = append(d.path, '/')
	d.path = appendEscaped(d.path, tok)
	return n
}

func (d *differ) emit(op string, v any) {
	d.ops = append(d.ops, Op{Op: op, Path: string(d.path), Value: v})
}

func (d *differ) value(a, b any) {
	ka, kb := kindOf(a), kindOf(b)
	switch {
	case ka == kMap && kb == kMap:
		d.object(a.(map[string]any), b.(map[string]any))
	case ka == kArray && kb == kArray:
		d.array(a.([]any), b.([]any))
	case !Equal(a, b):
		d.emit("replace", b)
	}
}

func (d *differ) object(a, b map[string]any) {
	if sameMap(a, b) {
		return
	}
	// The keys that differ, sorted: most members of two versions of an
	// object are the same value (often the same container).
	start := len(d.keys)
	for k, x := range a {
		y, ok := b[k]
		if !ok || !same(x, y) {
			d.keys = append(d.keys, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			d.keys = append(d.keys, k)
		}
	}
	keys := d.keys[start:]
	slices.Sort(keys)
	for _, k := range keys {
		x, inA := a[k]
		y, inB := b[k]
		n := d.at(k)
		switch {
		case !inB:
			d.emit("remove", NoValue{})
		case !inA:
			d.emit("add", y)
		default:
			d.value(x, y)
		}
		d.path = d.path[:n]
	}
	d.keys = d.keys[:start]
}

// same reports cheaply whether two values are certainly equal: the same
// container, or equal strings, bools or numbers.
func same(x, y any) bool {
	switch a := x.(type) {
	case map[string]any:
		b, ok := y.(map[string]any)
		return ok && sameMap(a, b) && (a == nil) == (b == nil)
	case []any:
		b, ok := y.([]any)
		return ok && sameSlice(a, b) && (a == nil) == (b == nil)
	case string:
		b, ok := y.(string)
		return ok && a == b
	case bool:
		b, ok := y.(bool)
		return ok && a == b
	case int64:
		b, ok := y.(int64)
		return ok && a == b
	case nil:
		return y == nil
	}
	return false
}

func (d *differ) array(a, b []any) {
	if sameSlice(a, b) {
		return
	}
	// Arrays of one length are diffed element by element (which finds the
	// common prefix and suffix anyway); otherwise the elements inserted or
	// removed are found between their common prefix and suffix.
	p, s := 0, 0
	if len(a) != len(b) {
		m := min(len(a), len(b))
		for p < m && Equal(a[p], b[p]) {
			p++
		}
		for s < m-p && Equal(a[len(a)-1-s], b[len(b)-1-s]) {
			s++
		}
	}
	am, bm := a[p:len(a)-s], b[p:len(b)-s]
	var num [20]byte
	for i := range min(len(am), len(bm)) {
		n := d.at(string(strconv.AppendInt(num[:0], int64(p+i), 10)))
		d.value(am[i], bm[i])
		d.path = d.path[:n]
	}
	for i := len(am); i < len(bm); i++ {
		n := d.at(string(strconv.AppendInt(num[:0], int64(p+i), 10)))
		d.emit("add", bm[i])
		d.path = d.path[:n]
	}
	for i := len(am) - 1; i >= len(bm); i-- {
		n := d.at(string(strconv.AppendInt(num[:0], int64(p+i), 10)))
		d.emit("remove", NoValue{})
		d.path = d.path[:n]
	}
}

// appendEscaped appends a JSON Pointer token: "~" as "~0", "/" as "~1".
func appendEscaped(dst []byte, tok string) []byte {
	if !strings.ContainsAny(tok, "~/") {
		return append(dst, tok...)
	}
	for i := 0; i < len(tok); i++ {
		switch c := tok[i]; c {
		case '~':
			dst = append(dst, '~', '0')
		case '/':
			dst = append(dst, '~', '1')
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// EscapeToken returns a JSON Pointer token for a key ("~" as "~0", "/" as
// "~1").
func EscapeToken(key string) string {
	if !strings.ContainsAny(key, "~/") {
		return key
	}
	return string(appendEscaped(make([]byte, 0, len(key)+2), key))
}

// Marshal writes ops as a JSON Patch document: a JSON array (an empty patch
// is []) of {"op","path"} objects with "from" when From is not empty and
// "value" unless Value is NoValue, or nil in a remove, move or copy.
// Strings and values are written as encoding/json writes them; a value that
// has no JSON (NaN, an infinity) is an error.
func Marshal(ops []Op) ([]byte, error) {
	buf := make([]byte, 0, 2+48*len(ops))
	buf = append(buf, '[')
	for i := range ops {
		op := &ops[i]
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"op":`...)
		buf = jsonenc.AppendString(buf, op.Op, true)
		buf = append(buf, `,"path":`...)
		buf = jsonenc.AppendString(buf, op.Path, true)
		if op.From != "" {
			buf = append(buf, `,"from":`...)
			buf = jsonenc.AppendString(buf, op.From, true)
		}
		if hasValue(op) {
			buf = append(buf, `,"value":`...)
			var err error
			if buf, err = appendJSON(buf, op.Value); err != nil {
				return nil, err
			}
		}
		buf = append(buf, '}')
	}
	return append(buf, ']'), nil
}

func hasValue(op *Op) bool {
	if _, ok := op.Value.(NoValue); ok {
		return false
	}
	switch op.Op {
	case "remove", "move", "copy":
		return op.Value != nil
	}
	return true
}
