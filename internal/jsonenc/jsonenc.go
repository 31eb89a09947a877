// Package jsonenc writes JSON as encoding/json does, byte for byte, without
// reflection: strings (with or without HTML escaping), float64s, and the
// JSON-shaped data Arbiter decodes objects into.
package jsonenc

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// AppendValue appends v as encoding/json.Marshal writes it (sorted keys,
// HTML characters escaped), without reflection for JSON-shaped data — the
// map[string]any, []any, string, int64, float64, bool and nil that
// manifest.Decode and DecodeJSON produce. Anything else goes through
// encoding/json. TestAppendValueMatchesMarshal compares the two.
func AppendValue(dst []byte, v any) ([]byte, error) {
	switch t := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		return strconv.AppendBool(dst, t), nil
	case string:
		return AppendString(dst, t, true), nil
	case int64:
		return strconv.AppendInt(dst, t, 10), nil
	case float64:
		if math.IsInf(t, 0) || math.IsNaN(t) {
			break // encoding/json's error
		}
		return AppendFloat(dst, t), nil
	case map[string]any:
		if t == nil {
			return append(dst, "null"...), nil
		}
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		dst = append(dst, '{')
		var err error
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendString(dst, k, true)
			dst = append(dst, ':')
			if dst, err = AppendValue(dst, t[k]); err != nil {
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
			if dst, err = AppendValue(dst, e); err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(dst, b...), nil
}

// AppendIndent appends v as json.Indent(dst, Marshal(v), prefix, indent)
// writes it (json.MarshalIndent without the prefix on the first line), for
// JSON-shaped data without reflection as AppendValue.
func AppendIndent(dst []byte, v any, prefix, indent string) ([]byte, error) {
	w := indenter{prefix: prefix, indent: indent}
	var lines [64]byte
	w.lines = append(append(lines[:0], '\n'), prefix...)
	return w.append(dst, v, 0)
}

// member is a key and value of an object.
type member struct {
	k string
	v any
}

// indenter writes indented JSON; lines is a line break, the prefix and as
// many indents as the deepest line written so far.
type indenter struct {
	prefix, indent string
	lines          []byte
}

// newline appends a line break and the indentation of depth.
func (w *indenter) newline(dst []byte, depth int) []byte {
	n := 1 + len(w.prefix) + depth*len(w.indent)
	for len(w.lines) < n {
		w.lines = append(w.lines, w.indent...)
	}
	return append(dst, w.lines[:n]...)
}

func (w *indenter) append(dst []byte, v any, depth int) ([]byte, error) {
	var err error
	switch t := v.(type) {
	case map[string]any:
		if len(t) == 0 {
			return AppendValue(dst, v) // {} or null
		}
		// The members, sorted by key: read once (no second lookup per key).
		var buf [16]member
		members := buf[:0]
		for k, v := range t {
			members = append(members, member{k, v})
		}
		slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.k, b.k) })
		dst = append(dst, '{')
		for i := range members {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = w.newline(dst, depth+1)
			dst = AppendString(dst, members[i].k, true)
			dst = append(dst, ':', ' ')
			if dst, err = w.append(dst, members[i].v, depth+1); err != nil {
				return nil, err
			}
		}
		return append(w.newline(dst, depth), '}'), nil
	case []any:
		if len(t) == 0 {
			return AppendValue(dst, v) // [] or null
		}
		dst = append(dst, '[')
		for i, e := range t {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = w.newline(dst, depth+1)
			if dst, err = w.append(dst, e, depth+1); err != nil {
				return nil, err
			}
		}
		return append(w.newline(dst, depth), ']'), nil
	case nil, bool, string, int64, float64:
		return AppendValue(dst, v)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, w.prefix+strings.Repeat(w.indent, depth), w.indent); err != nil {
		return nil, err
	}
	return append(dst, buf.Bytes()...), nil
}

// AppendFloat appends f in encoding/json's float64 format (ES6 number to
// string); f must be finite.
func AppendFloat(dst []byte, f float64) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// e-09 → e-9
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

const jsonHex = "0123456789abcdef"

// plain marks the bytes a JSON string holds as they are (no byte of a
// multi-byte UTF-8 sequence: those are checked); plainHTML also leaves out
// what json.Marshal escapes as HTML.
var plain, plainHTML = func() (s, h [256]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		s[b] = b != '"' && b != '\\'
		h[b] = s[b] && b != '<' && b != '>' && b != '&'
	}
	return s, h
}()

// AppendString appends s as a JSON string as encoding/json writes it:
// invalid UTF-8 as U+FFFD, U+2028 and U+2029 escaped, and <, > and &
// escaped when escapeHTML (json.Marshal; json.Encoder with
// SetEscapeHTML(false) does not).
func AppendString(dst []byte, s string, escapeHTML bool) []byte {
	tab := &plain
	if escapeHTML {
		tab = &plainHTML
	}
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		for i < len(s) && tab[s[i]] {
			i++
		}
		if i == len(s) {
			break
		}
		if b := s[i]; b < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', jsonHex[b>>4], jsonHex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', jsonHex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
