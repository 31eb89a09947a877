package manifest

import (
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/arbiter-pdp/arbiter/internal/jsonenc"
)

// Head identifies a document: its apiVersion and kind, and its metadata's
// name and namespace ("" when absent or not a string).
type Head struct {
	APIVersion, Kind, Name, Namespace string
}

func headOf(obj map[string]any) Head {
	return Head{APIVersion: str(obj, "apiVersion"), Kind: str(obj, "kind"), Name: meta(obj, "name"), Namespace: meta(obj, "namespace")}
}

// transcodeYAMLFast writes a document the fast path reads (see
// decodeYAMLFast) as JSON, appended to dst, without building its data —
// for callers that only pass documents on (apply --server) — and returns
// its head. It accepts exactly the documents decodeYAMLFast decodes to an
// object, and DecodeJSON of its output is that object
// (FuzzTranscodeYAMLFast checks both).
func transcodeYAMLFast(dst, data []byte) ([]byte, Head, bool) {
	t := yamlTranscoder{dst: dst}
	// No copy of data: its strings live only while it is transcoded (the
	// head's are cloned), and data is not modified meanwhile.
	if len(data) == 0 || !t.split(unsafe.String(&data[0], len(data))) || len(t.lines) == 0 || isSeqItem(t.lines[0].text) {
		return dst, Head{}, false
	}
	if !t.mapping(t.lines[0].indent, levelTop) || t.pos != len(t.lines) {
		return dst, Head{}, false
	}
	// The head's strings are slices of data: clone them, so that the head
	// does not keep data alive (nor see it change).
	h := Head{APIVersion: strings.Clone(t.head.APIVersion), Kind: strings.Clone(t.head.Kind),
		Name: strings.Clone(t.head.Name), Namespace: strings.Clone(t.head.Namespace)}
	return t.dst, h, true
}

// The levels of a mapping whose string values go to the head.
const (
	levelOther = iota
	levelTop
	levelMetadata
)

// yamlTranscoder is yamlParser writing JSON instead of building data.
type yamlTranscoder struct {
	yamlParser
	dst  []byte
	head Head
}

func (t *yamlTranscoder) block(indent, level int) bool {
	if t.pos >= len(t.lines) || t.lines[t.pos].indent != indent {
		return false
	}
	if isSeqItem(t.lines[t.pos].text) {
		return t.sequence(indent)
	}
	return t.mapping(indent, level)
}

func (t *yamlTranscoder) child(indent int, seqAtSameIndent bool, level int) bool {
	if t.pos < len(t.lines) {
		next := t.lines[t.pos]
		if next.indent > indent || seqAtSameIndent && next.indent == indent && isSeqItem(next.text) {
			return t.block(next.indent, level)
		}
	}
	t.dst = append(t.dst, "null"...)
	return true
}

// inline writes a value written on its key's or item's line (as
// inlineValue reads it); s is the string it is, if it is one.
func (t *yamlTranscoder) inline(rest string, indent int) (s string, isString, ok bool) {
	if !t.noContinuation(indent) {
		return "", false, false
	}
	switch rest[0] {
	case '"', '\'':
		s, after, ok := quoted(rest)
		if !ok || !endOfLine(after) {
			return "", false, false
		}
		t.dst = jsonenc.AppendString(t.dst, s, true)
		return s, true, true
	case '[', '{':
		v, ok := inlineValue(rest)
		if !ok {
			return "", false, false
		}
		// A flow sequence of scalars or an empty map: no error.
		t.dst, _ = jsonenc.AppendValue(t.dst, v)
		return "", false, true
	}
	rest, ok = plainScalar(rest)
	if !ok {
		return "", false, false
	}
	k, n, ok := resolvePlainKind(rest)
	if !ok {
		return "", false, false
	}
	switch k {
	case scalarInt:
		t.dst = strconv.AppendInt(t.dst, n, 10)
	case scalarTrue:
		t.dst = append(t.dst, "true"...)
	case scalarFalse:
		t.dst = append(t.dst, "false"...)
	case scalarNull:
		t.dst = append(t.dst, "null"...)
	default:
		t.dst = jsonenc.AppendString(t.dst, rest, true)
		return rest, true, true
	}
	return "", false, true
}

// maxLinearKeys is how many keys of a mapping are checked for duplicates
// by a scan before a set takes over.
const maxLinearKeys = 16

func (t *yamlTranscoder) mapping(indent, level int) bool {
	t.dst = append(t.dst, '{')
	var small [maxLinearKeys]string
	keys := small[:0]
	var set map[string]bool
	for n := 0; t.pos < len(t.lines); n++ {
		l := t.lines[t.pos]
		if l.indent != indent || isSeqItem(l.text) {
			break
		}
		key, rest, isKey, ok := splitKey(l.text)
		if !ok || !isKey {
			return false
		}
		switch {
		case set != nil:
			if set[key] {
				return false
			}
			set[key] = true
		case slices.Contains(keys, key):
			return false
		case len(keys) < maxLinearKeys:
			keys = append(keys, key)
		default:
			set = make(map[string]bool, 2*maxLinearKeys)
			for _, k := range keys {
				set[k] = true
			}
			set[key] = true
		}
		if n > 0 {
			t.dst = append(t.dst, ',')
		}
		t.dst = jsonenc.AppendString(t.dst, key, true)
		t.dst = append(t.dst, ':')
		t.pos++
		if rest == "" || rest[0] == '#' {
			childLevel := levelOther
			if level == levelTop && key == "metadata" {
				childLevel = levelMetadata
			}
			if !t.child(indent, true, childLevel) {
				return false
			}
			continue
		}
		s, isString, ok := t.inline(rest, indent)
		if !ok {
			return false
		}
		if isString {
			switch {
			case level == levelTop && key == "apiVersion":
				t.head.APIVersion = s
			case level == levelTop && key == "kind":
				t.head.Kind = s
			case level == levelMetadata && key == "name":
				t.head.Name = s
			case level == levelMetadata && key == "namespace":
				t.head.Namespace = s
			}
		}
	}
	if t.pos < len(t.lines) && t.lines[t.pos].indent > indent {
		return false
	}
	t.dst = append(t.dst, '}')
	return true
}

func (t *yamlTranscoder) sequence(indent int) bool {
	t.dst = append(t.dst, '[')
	for n := 0; t.pos < len(t.lines); n++ {
		line := t.lines[t.pos]
		if line.indent != indent || !isSeqItem(line.text) {
			break
		}
		if n > 0 {
			t.dst = append(t.dst, ',')
		}
		rest := line.text[1:]
		sp := 0
		for sp < len(rest) && rest[sp] == ' ' {
			sp++
		}
		rest = rest[sp:]
		switch {
		case rest == "" || rest[0] == '#':
			t.pos++
			if !t.child(indent, false, levelOther) {
				return false
			}
		case isSeqItem(rest):
			return false
		default:
			if _, _, isKey, kok := splitKey(rest); !kok {
				return false
			} else if isKey {
				// "- key: value": a mapping whose keys are in this column.
				col := indent + 1 + sp
				t.lines[t.pos] = yamlLine{indent: col, text: rest}
				if !t.mapping(col, levelOther) {
					return false
				}
			} else {
				t.pos++
				if _, _, ok := t.inline(rest, indent); !ok {
					return false
				}
			}
		}
	}
	if t.pos < len(t.lines) && t.lines[t.pos].indent > indent {
		return false
	}
	t.dst = append(t.dst, ']')
	return true
}
