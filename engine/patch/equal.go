package patch

import (
	"bytes"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/arbiter-pdp/arbiter/internal/jsonenc"
)

type eqResult uint8

const (
	eqFalse eqResult = iota
	eqTrue
	eqPanic // evanphx dereferences a nil node
)

// equal is evanphx's lazyNode.equal of a document value v (not null) and a
// test value w (not null; rawNull for a null value). Objects compare by
// keys, a null member equal only to a null member (a rawNull is no null
// member there); arrays by elements, where a null element on either side
// makes evanphx panic; a rawNull is an empty object, and against an array
// an empty array; scalars compare by JSON text.
func equal(v, w any) eqResult {
	switch kindOf(v) {
	case kMap, kRawNull:
		wm, ok := asObject(w)
		if !ok {
			return eqFalse
		}
		vm, _ := v.(map[string]any)
		if len(vm) != len(wm) {
			return eqFalse
		}
		// evanphx ranges over a Go map: a differing member is found before or
		// after a panicking one by chance. A difference wins here.
		res := eqTrue
		for k, x := range vm {
			y, ok := wm[k]
			if !ok {
				return eqFalse
			}
			xn, yn := kindOf(x) == kNull, kindOf(y) == kNull
			if xn != yn {
				return eqFalse
			}
			if xn {
				continue
			}
			switch equal(x, y) {
			case eqFalse:
				return eqFalse
			case eqPanic:
				res = eqPanic
			}
		}
		return res
	case kArray:
		vs := v.([]any)
		var ws []any
		switch t := w.(type) {
		case []any:
			ws = t
		case rawNull:
		default:
			return eqFalse
		}
		if len(vs) != len(ws) {
			return eqFalse
		}
		for i, x := range vs {
			if kindOf(x) == kNull || kindOf(ws[i]) == kNull {
				return eqPanic
			}
			if r := equal(x, ws[i]); r != eqTrue {
				return r
			}
		}
		return eqTrue
	}
	switch kindOf(w) {
	case kMap, kArray, kRawNull:
		return eqFalse
	}
	if scalarEqual(v, w) {
		return eqTrue
	}
	return eqFalse
}

// asObject is w as evanphx's tryDoc reads it: an object, or a null as an
// empty one.
func asObject(w any) (map[string]any, bool) {
	switch t := w.(type) {
	case map[string]any:
		return t, true
	case rawNull:
		return nil, true
	}
	return nil, false
}

// scalarEqual reports whether two scalars have the same JSON text, as
// encoding/json writes them.
func scalarEqual(a, b any) bool {
	switch x := a.(type) {
	case string:
		if y, ok := b.(string); ok {
			return x == y || stringsEqualJSON(x, y)
		}
		return false
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case int64:
		if y, ok := b.(int64); ok {
			return x == y
		}
	case float64:
		if y, ok := b.(float64); ok {
			// -0 is written "-0"; NaN and infinities are no JSON.
			return x == y && math.Signbit(x) == math.Signbit(y) && !math.IsInf(x, 0)
		}
	}
	var ab, bb [64]byte
	at, ok := numberText(ab[:0], a)
	if !ok {
		return false
	}
	bt, ok := numberText(bb[:0], b)
	return ok && bytes.Equal(at, bt)
}

// numberText appends the JSON text encoding/json writes for a number (or
// any other scalar but a string or a bool), or reports that it has none.
func numberText(dst []byte, v any) ([]byte, bool) {
	switch t := v.(type) {
	case int64:
		return strconv.AppendInt(dst, t, 10), true
	case float64:
		if math.IsInf(t, 0) || math.IsNaN(t) {
			return dst, false
		}
		return jsonenc.AppendFloat(dst, t), true
	case string, bool, nil, rawNull:
		return dst, false
	}
	b, err := jsonenc.AppendValue(dst, v)
	return b, err == nil
}

// stringsEqualJSON reports whether two different strings are written alike
// by encoding/json: only when they differ in invalid UTF-8 bytes, each
// written "\ufffd" (while a valid U+FFFD is written as itself).
func stringsEqualJSON(a, b string) bool {
	if utf8.ValidString(a) || utf8.ValidString(b) {
		return false // a valid string is written as nothing else is
	}
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb || (na == 1) != (nb == 1) {
			return false
		}
		a, b = a[na:], b[nb:]
	}
	return a == "" && b == ""
}

// Equal reports whether two JSON-shaped values have the same JSON encoding
// up to the order of object members: numbers by the text encoding/json
// writes (int64(1) equals float64(1)), strings as written (each invalid
// UTF-8 byte as the escape \ufffd; object keys compare as Go strings), nil
// maps and slices as null.
func Equal(a, b any) bool {
	ka, kb := kindOf(a), kindOf(b)
	if ka == kRawNull {
		ka = kNull
	}
	if kb == kRawNull {
		kb = kNull
	}
	if ka != kb {
		return false
	}
	switch ka {
	case kNull:
		return true
	case kMap:
		x, y := a.(map[string]any), b.(map[string]any)
		if len(x) != len(y) {
			return false
		}
		if sameMap(x, y) {
			return true
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !Equal(v, w) {
				return false
			}
		}
		return true
	case kArray:
		x, y := a.([]any), b.([]any)
		if len(x) != len(y) {
			return false
		}
		if sameSlice(x, y) {
			return true
		}
		for i := range x {
			if !Equal(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return scalarEqual(a, b)
}

func sameMap(x, y map[string]any) bool {
	return identity(x) == identity(y)
}

func sameSlice(x, y []any) bool {
	return len(x) == len(y) && (len(x) == 0 || &x[0] == &y[0])
}

// appendJSON appends v as encoding/json writes it (a rawNull as null), or
// encoding/json's error (NaN, infinities).
func appendJSON(dst []byte, v any) ([]byte, error) {
	switch t := v.(type) {
	case rawNull:
		return append(dst, "null"...), nil
	case map[string]any:
		if t == nil {
			return append(dst, "null"...), nil
		}
		dst = append(dst, '{')
		var err error
		for i, k := range sortedKeys(t) {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = jsonenc.AppendString(dst, k, true)
			dst = append(dst, ':')
			if dst, err = appendJSON(dst, t[k]); err != nil {
				return nil, err
			}
		}
		return append(dst, '}'), nil
	case []any:
		if t == nil {
			return append(dst, "null"...), nil
		}
		dst = append(dst, '[')
		var err error
		for i, e := range t {
			if i > 0 {
				dst = append(dst, ',')
			}
			if dst, err = appendJSON(dst, e); err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	}
	return jsonenc.AppendValue(dst, v)
}
