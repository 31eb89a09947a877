package manifest

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// decodeJSONValue is a small, allocation-lean JSON decoder producing the
// same JSON-shaped data as Kubernetes' decoding (k8s.io/apimachinery
// util/json): objects as map[string]any (the last of duplicate keys
// wins), arrays as []any, integers that fit int64 as int64, other numbers
// as float64, strings (invalid UTF-8 replaced by U+FFFD), bools and nil.
// FuzzDecodeJSON checks it against that decoder.
func decodeJSONValue(data []byte) (any, error) {
	v, _, err := decodeJSONValueSized(data)
	return v, err
}

// Sizes bound JSON-shaped data: Entries is the most entries of one list or
// map, Length the longest string, map key, list or map (a list or map
// counts its entries) — what a CEL cost estimate needs to know of it.
type Sizes struct {
	Entries, Length uint64
}

// Max returns the sizes bounding both.
func (s Sizes) Max(o Sizes) Sizes {
	return Sizes{Entries: max(s.Entries, o.Entries), Length: max(s.Length, o.Length)}
}

// SizesOf measures JSON-shaped data (DecodeJSONSized measures it as it
// decodes).
func SizesOf(v any) Sizes {
	switch t := v.(type) {
	case string:
		return Sizes{Length: uint64(len(t))}
	case map[string]any:
		n := uint64(len(t))
		out := Sizes{Entries: n, Length: n}
		for k, e := range t {
			out = out.Max(SizesOf(e))
			out.Length = max(out.Length, uint64(len(k)))
		}
		return out
	case []any:
		n := uint64(len(t))
		out := Sizes{Entries: n, Length: n}
		for _, e := range t {
			out = out.Max(SizesOf(e))
		}
		return out
	}
	return Sizes{}
}

// DecodeJSONSizedOwned is DecodeJSONSized for a caller that hands js over:
// the data's strings are slices of js itself rather than of a copy, so js
// must never change afterwards (a decoded request's own bytes, say).
func DecodeJSONSizedOwned(js []byte) (map[string]any, Sizes, error) {
	if len(js) == 0 {
		return DecodeJSONSized(js)
	}
	v, sizes, err := decodeJSONFrom(js, unsafe.String(&js[0], len(js)))
	if err != nil {
		return nil, Sizes{}, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, Sizes{}, fmt.Errorf("document is not an object")
	}
	return obj, sizes, nil
}

// DecodeJSONSized is DecodeJSON that also measures the object's Sizes as
// it decodes it (sparing a walk of the data).
func DecodeJSONSized(js []byte) (map[string]any, Sizes, error) {
	v, sizes, err := decodeJSONValueSized(js)
	if err != nil {
		return nil, Sizes{}, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, Sizes{}, fmt.Errorf("document is not an object")
	}
	return obj, sizes, nil
}

func decodeJSONValueSized(data []byte) (any, Sizes, error) {
	// Strings are slices of one copy of the input: keys cost nothing and
	// a string value only its interface header.
	return decodeJSONFrom(data, string(data))
}

// decodeJSONFrom decodes data, whose strings are slices of src (data as a
// string).
func decodeJSONFrom(data []byte, src string) (any, Sizes, error) {
	d := jsonDecoder{data: data, src: src}
	d.skipSpace()
	v, err := d.value(0)
	if err != nil {
		return nil, Sizes{}, err
	}
	d.skipSpace()
	if d.pos != len(d.data) {
		return nil, Sizes{}, d.errorf("invalid character %q after top-level value", d.data[d.pos])
	}
	if d.duplicates {
		return v, SizesOf(v), nil
	}
	return v, d.sizes, nil
}

// maxJSONDepth bounds nesting, as encoding/json does (10000).
const maxJSONDepth = 10000

type jsonDecoder struct {
	data []byte
	// src is data as a string.
	src string
	pos int
	// sizes are the sizes of what is decoded so far; with duplicates
	// (duplicate keys, whose values but the last are dropped) they may be
	// larger than the data's.
	sizes      Sizes
	duplicates bool
}

// container counts a list or map of n entries in sizes.
func (d *jsonDecoder) container(n int) {
	d.sizes.Entries = max(d.sizes.Entries, uint64(n))
	d.sizes.Length = max(d.sizes.Length, uint64(n))
}

var errJSONEnd = errors.New("unexpected end of JSON input")

func (d *jsonDecoder) errorf(format string, args ...any) error {
	return fmt.Errorf("invalid JSON at offset %d: %s", d.pos, fmt.Sprintf(format, args...))
}

func (d *jsonDecoder) skipSpace() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

func (d *jsonDecoder) value(depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, d.errorf("exceeded max depth")
	}
	if d.pos >= len(d.data) {
		return nil, errJSONEnd
	}
	switch c := d.data[d.pos]; {
	case c == '{':
		return d.object(depth)
	case c == '[':
		return d.array(depth)
	case c == '"':
		s, err := d.string()
		if err != nil {
			return nil, err
		}
		return s, nil
	case c == 't':
		return d.literal("true", true)
	case c == 'f':
		return d.literal("false", false)
	case c == 'n':
		return d.literal("null", nil)
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	default:
		return nil, d.errorf("invalid character %q looking for beginning of value", c)
	}
}

func (d *jsonDecoder) literal(word string, v any) (any, error) {
	if len(d.data)-d.pos < len(word) {
		return nil, errJSONEnd
	}
	if string(d.data[d.pos:d.pos+len(word)]) != word {
		return nil, d.errorf("invalid literal")
	}
	d.pos += len(word)
	return v, nil
}

func (d *jsonDecoder) object(depth int) (any, error) {
	d.pos++ // {
	m := make(map[string]any)
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == '}' {
		d.pos++
		return m, nil // no entries: nothing to count
	}
	for pairs := 1; ; pairs++ {
		d.skipSpace()
		if d.pos >= len(d.data) {
			return nil, errJSONEnd
		}
		if d.data[d.pos] != '"' {
			return nil, d.errorf("invalid character %q looking for beginning of object key string", d.data[d.pos])
		}
		k, err := d.string()
		if err != nil {
			return nil, err
		}
		d.skipSpace()
		if d.pos >= len(d.data) {
			return nil, errJSONEnd
		}
		if d.data[d.pos] != ':' {
			return nil, d.errorf("invalid character %q after object key", d.data[d.pos])
		}
		d.pos++
		d.skipSpace()
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		m[k] = v
		d.skipSpace()
		if d.pos >= len(d.data) {
			return nil, errJSONEnd
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case '}':
			d.pos++
			d.container(len(m))
			if len(m) != pairs {
				// A duplicate key: what its first value counted is gone.
				d.duplicates = true
			}
			return m, nil
		default:
			return nil, d.errorf("invalid character %q after object key:value pair", d.data[d.pos])
		}
	}
}

func (d *jsonDecoder) array(depth int) (any, error) {
	d.pos++ // [
	l := make([]any, 0, 4)
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == ']' {
		d.pos++
		return l, nil
	}
	for {
		d.skipSpace()
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		l = append(l, v)
		d.skipSpace()
		if d.pos >= len(d.data) {
			return nil, errJSONEnd
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case ']':
			d.pos++
			d.container(len(l))
			return l, nil
		default:
			return nil, d.errorf("invalid character %q after array element", d.data[d.pos])
		}
	}
}

// string decodes a string (a key or a value), counting its length in
// sizes.
func (d *jsonDecoder) string() (string, error) {
	str, err := d.unquote()
	d.sizes.Length = max(d.sizes.Length, uint64(len(str)))
	return str, err
}

func (d *jsonDecoder) unquote() (string, error) {
	d.pos++ // "
	start := d.pos
	// Fast path: no escapes, valid ASCII/UTF-8.
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		if c == '"' {
			s := d.src[start:d.pos]
			d.pos++
			if utf8.ValidString(s) {
				return s, nil
			}
			return string([]rune(s)), nil // invalid bytes become U+FFFD
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", d.errorf("invalid character %q in string literal", c)
		}
		d.pos++
	}
	if d.pos >= len(d.data) {
		return "", errJSONEnd
	}
	// Slow path with escapes.
	buf := make([]byte, 0, d.pos-start+16)
	buf = append(buf, d.data[start:d.pos]...)
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		switch {
		case c == '"':
			d.pos++
			if utf8.Valid(buf) {
				return string(buf), nil
			}
			return string([]rune(string(buf))), nil
		case c == '\\':
			d.pos++
			if d.pos >= len(d.data) {
				return "", errJSONEnd
			}
			e := d.data[d.pos]
			d.pos++
			switch e {
			case '"', '\\', '/':
				buf = append(buf, e)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r, ok := d.hex4()
				if !ok {
					return "", d.errorf("invalid \\u escape")
				}
				if utf16.IsSurrogate(r) {
					if d.pos+1 < len(d.data) && d.data[d.pos] == '\\' && d.data[d.pos+1] == 'u' {
						save := d.pos
						d.pos += 2
						r2, ok2 := d.hex4()
						if !ok2 {
							return "", d.errorf("invalid \\u escape")
						}
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							buf = utf8.AppendRune(buf, dec)
							continue
						}
						d.pos = save
					}
					buf = utf8.AppendRune(buf, utf8.RuneError)
					continue
				}
				buf = utf8.AppendRune(buf, r)
			default:
				return "", d.errorf("invalid escape character %q", e)
			}
		case c < 0x20:
			return "", d.errorf("invalid character %q in string literal", c)
		default:
			buf = append(buf, c)
			d.pos++
		}
	}
	return "", errJSONEnd
}

func (d *jsonDecoder) hex4() (rune, bool) {
	if len(d.data)-d.pos < 4 {
		return 0, false
	}
	var r rune
	for _, c := range d.data[d.pos : d.pos+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	d.pos += 4
	return r, true
}

func (d *jsonDecoder) number() (any, error) {
	start := d.pos
	if d.data[d.pos] == '-' {
		d.pos++
	}
	digits := func() int {
		n := 0
		for d.pos < len(d.data) && d.data[d.pos] >= '0' && d.data[d.pos] <= '9' {
			d.pos++
			n++
		}
		return n
	}
	if d.pos >= len(d.data) {
		return nil, errJSONEnd
	}
	if d.data[d.pos] == '0' {
		d.pos++
	} else if digits() == 0 {
		return nil, d.errorf("invalid character in numeric literal")
	}
	isInt := true
	if d.pos < len(d.data) && d.data[d.pos] == '.' {
		isInt = false
		d.pos++
		if digits() == 0 {
			return nil, d.errorf("invalid character after decimal point in numeric literal")
		}
	}
	if d.pos < len(d.data) && (d.data[d.pos] == 'e' || d.data[d.pos] == 'E') {
		isInt = false
		d.pos++
		if d.pos < len(d.data) && (d.data[d.pos] == '+' || d.data[d.pos] == '-') {
			d.pos++
		}
		if digits() == 0 {
			return nil, d.errorf("invalid character in exponent of numeric literal")
		}
	}
	text := string(d.data[start:d.pos])
	if isInt {
		if i, err := strconv.ParseInt(text, 10, 64); err == nil {
			return i, nil
		}
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange && !math.IsInf(f, 0) {
			return f, nil
		}
		return nil, d.errorf("number %s out of range", text)
	}
	return f, nil
}
