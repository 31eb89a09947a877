package manifest

import (
	"strconv"
	"strings"
)

// decodeYAMLFast decodes the YAML most manifests are written in — block
// mappings and sequences, plain and quoted one-line scalars, one-line flow
// sequences of scalars, {} — straight to JSON-shaped data, about ten times
// faster than sigs.k8s.io/yaml's YAML → JSON → data. It declines (ok false)
// anything else: anchors, tags, block scalars, multi-line scalars, flow
// mappings, non-ASCII text, tabs, scalars YAML 1.1 would resolve to
// something other than a string, a decimal integer, a bool or null, and
// duplicate keys. Decode then takes the full path, so the result is always
// what sigs.k8s.io/yaml gives; FuzzDecodeYAMLFast checks that for every
// document the fast path accepts.
func decodeYAMLFast(data []byte) (map[string]any, bool) {
	p := yamlParser{}
	// The data's strings are slices of one copy of it.
	if !p.split(string(data)) || len(p.lines) == 0 {
		return nil, false
	}
	v, ok := p.block(p.lines[0].indent)
	if !ok || p.pos != len(p.lines) {
		return nil, false
	}
	m, ok := v.(map[string]any)
	return m, ok
}

type yamlLine struct {
	indent int
	text   string
}

type yamlParser struct {
	lines []yamlLine
	pos   int
}

// split cuts src into its content lines (indentation and text), leaving
// out blank and comment lines; it declines characters the fast path does
// not handle.
func (p *yamlParser) split(src string) bool {
	if !plainText(src) {
		return false
	}
	p.lines = make([]yamlLine, 0, strings.Count(src, "\n")+1)
	for len(src) > 0 {
		line := src
		if i := strings.IndexByte(src, '\n'); i >= 0 {
			line, src = src[:i], src[i+1:]
		} else {
			src = ""
		}
		indent := 0
		for indent < len(line) && line[indent] == ' ' {
			indent++
		}
		text := strings.TrimRight(line[indent:], " ")
		if text == "" || text[0] == '#' {
			continue
		}
		if text[0] == '%' || strings.HasPrefix(text, "---") || strings.HasPrefix(text, "...") {
			return false
		}
		p.lines = append(p.lines, yamlLine{indent: indent, text: text})
	}
	return true
}

// plainText says whether data is printable ASCII and line breaks only
// (no other control character, no DEL, nothing past ASCII): what the fast
// path reads. It checks eight bytes at a time.
func plainText(data string) bool {
	const (
		ones = 0x0101010101010101
		high = 0x8080808080808080
	)
	i := 0
	for ; i+8 <= len(data); i += 8 {
		x := uint64(data[i]) | uint64(data[i+1])<<8 | uint64(data[i+2])<<16 | uint64(data[i+3])<<24 |
			uint64(data[i+4])<<32 | uint64(data[i+5])<<40 | uint64(data[i+6])<<48 | uint64(data[i+7])<<56
		if x&high != 0 {
			return false
		}
		// With every high bit clear no byte carries into the next:
		// ge20 marks bytes >= 0x20, del bytes == 0x7f, nl bytes == '\n'.
		ge20 := (x + 0x60*ones) & high
		del := (x + ones) & high
		nl := ^((x ^ '\n'*ones) + 0x7f*ones) & high
		if del != 0 || ^ge20&high&^nl != 0 {
			return false
		}
	}
	for _, c := range []byte(data[i:]) {
		if c >= 0x80 || c < 0x20 && c != '\n' || c == 0x7f {
			return false
		}
	}
	return true
}

func isSeqItem(text string) bool { return text == "-" || strings.HasPrefix(text, "- ") }

// block parses the mapping or sequence starting at the current line.
func (p *yamlParser) block(indent int) (any, bool) {
	if p.pos >= len(p.lines) || p.lines[p.pos].indent != indent {
		return nil, false
	}
	if isSeqItem(p.lines[p.pos].text) {
		return p.sequence(indent)
	}
	return p.mapping(indent)
}

// child parses the value of a key or item whose own line has nothing
// after the indicator: a nested block, or null.
func (p *yamlParser) child(indent int, seqAtSameIndent bool) (any, bool) {
	if p.pos >= len(p.lines) {
		return nil, true
	}
	next := p.lines[p.pos]
	if next.indent > indent || seqAtSameIndent && next.indent == indent && isSeqItem(next.text) {
		return p.block(next.indent)
	}
	return nil, true
}

// noContinuation checks a one-line value is not continued on deeper lines.
func (p *yamlParser) noContinuation(indent int) bool {
	return p.pos >= len(p.lines) || p.lines[p.pos].indent <= indent
}

func (p *yamlParser) mapping(indent int) (any, bool) {
	m := make(map[string]any, 8)
	for p.pos < len(p.lines) {
		l := p.lines[p.pos]
		if l.indent != indent || isSeqItem(l.text) {
			break
		}
		key, rest, isKey, ok := splitKey(l.text)
		if !ok || !isKey {
			return nil, false
		}
		if _, dup := m[key]; dup {
			return nil, false
		}
		p.pos++
		var v any
		if rest == "" || rest[0] == '#' {
			if v, ok = p.child(indent, true); !ok {
				return nil, false
			}
		} else {
			if v, ok = inlineValue(rest); !ok || !p.noContinuation(indent) {
				return nil, false
			}
		}
		m[key] = v
	}
	if p.pos < len(p.lines) && p.lines[p.pos].indent > indent {
		return nil, false
	}
	return m, true
}

func (p *yamlParser) sequence(indent int) (any, bool) {
	l := make([]any, 0, 4)
	for p.pos < len(p.lines) {
		line := p.lines[p.pos]
		if line.indent != indent || !isSeqItem(line.text) {
			break
		}
		rest := line.text[1:]
		sp := 0
		for sp < len(rest) && rest[sp] == ' ' {
			sp++
		}
		rest = rest[sp:]
		var v any
		var ok bool
		switch {
		case rest == "" || rest[0] == '#':
			p.pos++
			if v, ok = p.child(indent, false); !ok {
				return nil, false
			}
		case isSeqItem(rest):
			return nil, false
		default:
			if _, _, isKey, kok := splitKey(rest); !kok {
				return nil, false
			} else if isKey {
				// "- key: value": a mapping whose keys are in this column.
				col := indent + 1 + sp
				p.lines[p.pos] = yamlLine{indent: col, text: rest}
				if v, ok = p.mapping(col); !ok {
					return nil, false
				}
			} else {
				p.pos++
				if v, ok = inlineValue(rest); !ok || !p.noContinuation(indent) {
					return nil, false
				}
			}
		}
		l = append(l, v)
	}
	if p.pos < len(p.lines) && p.lines[p.pos].indent > indent {
		return nil, false
	}
	return l, true
}

// maxKeySpan bounds where a key's colon may be: libyaml refuses implicit
// keys longer than 1,024 characters (spaces before the colon included).
const maxKeySpan = 512

// splitKey splits "key: rest" (rest "" when the line ends at the colon).
// isKey is false for a line that is a scalar, not a key; ok is false when
// the fast path declines the line.
func splitKey(text string) (key, rest string, isKey, ok bool) {
	if text[0] == '"' || text[0] == '\'' {
		s, after, qok := quoted(text)
		if !qok {
			return "", "", false, false
		}
		colon := len(text) - len(strings.TrimLeft(after, " "))
		after = strings.TrimLeft(after, " ")
		if after == ":" || strings.HasPrefix(after, ": ") {
			if colon > maxKeySpan {
				return "", "", false, false
			}
			return s, strings.TrimLeft(after[1:], " "), true, true
		}
		return "", "", false, true
	}
	i := strings.Index(text, ": ")
	if c := strings.Index(text, " #"); c >= 0 && (i < 0 || c < i) {
		i = -1
		text = strings.TrimRight(text[:c], " ")
	}
	switch {
	case i >= 0:
		key, rest = strings.TrimRight(text[:i], " "), strings.TrimLeft(text[i+2:], " ")
	case strings.HasSuffix(text, ":"):
		i = len(text) - 1
		key = strings.TrimRight(text[:i], " ")
	default:
		return "", "", false, true
	}
	if key == "" || key == "<<" || i > maxKeySpan || !plainStart(key) {
		return "", "", false, false
	}
	if k, _, ok := resolvePlainKind(key); !ok || k != scalarString {
		return "", "", false, false
	}
	return key, rest, true, true
}

// plainStart says whether s may start a plain scalar the fast path reads.
func plainStart(s string) bool {
	switch s[0] {
	case '-':
		return len(s) > 1 && s[1] != ' '
	case '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`':
		return false
	}
	return true
}

// inlineValue parses a value written on its key's or item's line.
func inlineValue(s string) (any, bool) {
	switch s[0] {
	case '"', '\'':
		v, after, ok := quoted(s)
		if !ok || !endOfLine(after) {
			return nil, false
		}
		return v, true
	case '[':
		return flowSequence(s)
	case '{':
		rest := strings.TrimLeft(s[1:], " ")
		if !strings.HasPrefix(rest, "}") || !endOfLine(rest[1:]) {
			return nil, false
		}
		return map[string]any{}, true
	}
	text, ok := plainScalar(s)
	if !ok {
		return nil, false
	}
	return resolvePlain(text)
}

// plainScalar returns the text of a plain scalar written on its key's or
// item's line (without a trailing comment); ok is false when the fast path
// declines it.
func plainScalar(s string) (string, bool) {
	if !plainStart(s) {
		return "", false
	}
	if c := strings.Index(s, " #"); c >= 0 {
		s = strings.TrimRight(s[:c], " ")
	}
	if strings.Contains(s, ": ") || strings.HasSuffix(s, ":") {
		return "", false
	}
	return s, true
}

// endOfLine says whether what follows a value is only spaces and a comment.
func endOfLine(s string) bool {
	t := strings.TrimLeft(s, " ")
	return t == "" || t[0] == '#' && len(t) < len(s)
}

// quoted parses a one-line double- or single-quoted scalar at the start
// of s, returning it and what follows.
func quoted(s string) (string, string, bool) {
	q := s[0]
	// Most quoted scalars have no escapes: the text is the scalar.
	for i := 1; i < len(s); i++ {
		if s[i] == q {
			if q == '\'' && i+1 < len(s) && s[i+1] == '\'' {
				break
			}
			return s[1:i], s[i+1:], true
		}
		if s[i] == '\\' && q == '"' {
			break
		}
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == q && q == '\'' && i+1 < len(s) && s[i+1] == '\'':
			b.WriteByte('\'')
			i++
		case c == q:
			return b.String(), s[i+1:], true
		case c == '\\' && q == '"':
			if i+1 >= len(s) {
				return "", "", false
			}
			i++
			switch s[i] {
			case '"', '\\': // not \/: YAML 1.1 (go-yaml v2) has no such escape
				b.WriteByte(s[i])
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			default:
				return "", "", false
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", "", false
}

// flowSequence parses a one-line [a, "b", 3] of scalars.
func flowSequence(s string) (any, bool) {
	l := []any{}
	s = strings.TrimLeft(s[1:], " ")
	if strings.HasPrefix(s, "]") {
		return l, endOfLine(s[1:])
	}
	for {
		var v any
		var ok bool
		if s == "" {
			return nil, false
		}
		if s[0] == '"' || s[0] == '\'' {
			var str string
			str, s, ok = quoted(s)
			if !ok {
				return nil, false
			}
			v = str
		} else {
			end := strings.IndexAny(s, ",]")
			if end <= 0 {
				return nil, false
			}
			// In a flow collection go-yaml v2 ends a plain scalar at any
			// of ,[]{}? (and ": "); the fast path takes only items with none.
			item := strings.TrimRight(s[:end], " ")
			if item == "" || !plainStart(item) || strings.ContainsAny(item, "[]{}#:?") {
				return nil, false
			}
			if v, ok = resolvePlain(item); !ok {
				return nil, false
			}
			s = s[end:]
		}
		l = append(l, v)
		s = strings.TrimLeft(s, " ")
		if s == "" {
			return nil, false
		}
		switch s[0] {
		case ',':
			s = strings.TrimLeft(s[1:], " ")
			if s == "" || s[0] == ']' {
				return nil, false
			}
		case ']':
			return l, endOfLine(s[1:])
		default:
			return nil, false
		}
	}
}

// The kinds of scalars resolvePlain resolves.
type scalarKind uint8

const (
	scalarString scalarKind = iota
	scalarInt
	scalarTrue
	scalarFalse
	scalarNull
)

// resolvePlain resolves a plain scalar as go-yaml v2 (YAML 1.1) does, for
// the strings, decimal integers, bools and nulls the fast path handles.
func resolvePlain(s string) (any, bool) {
	k, n, ok := resolvePlainKind(s)
	switch k {
	case scalarInt:
		return n, ok
	case scalarTrue:
		return true, ok
	case scalarFalse:
		return false, ok
	case scalarNull:
		return nil, ok
	}
	return s, ok
}

// resolvePlainKind is resolvePlain without making a value: the kind, and
// the number of an integer.
func resolvePlainKind(s string) (scalarKind, int64, bool) {
	switch s {
	case "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON":
		return scalarTrue, 0, true
	case "n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF":
		return scalarFalse, 0, true
	case "~", "null", "Null", "NULL":
		return scalarNull, 0, true
	}
	switch c := s[0]; {
	case c == '.':
		if _, err := strconv.ParseFloat(s, 64); err == nil || strings.EqualFold(s, ".nan") || strings.EqualFold(s, ".inf") {
			return 0, 0, false
		}
	case c == '+' || c == '-' || c >= '0' && c <= '9':
		if isDecimal(s) {
			n, err := strconv.ParseInt(s, 10, 64)
			return scalarInt, n, err == nil
		}
		// Anything YAML 1.1 could read as a number or a timestamp.
		if len(s) >= 5 && isDigits(s[:4]) && s[4] == '-' {
			return 0, 0, false
		}
		plain := strings.ReplaceAll(s, "_", "")
		// numberish: no strconv parser reads it otherwise (and their
		// errors allocate).
		if numberish(plain) {
			if _, err := strconv.ParseInt(plain, 0, 64); err == nil {
				return 0, 0, false
			}
			if _, err := strconv.ParseUint(plain, 0, 64); err == nil {
				return 0, 0, false
			}
			if _, err := strconv.ParseFloat(plain, 64); err == nil {
				return 0, 0, false
			}
		}
		if strings.HasPrefix(plain, "0b") || strings.HasPrefix(plain, "-0b") || strings.HasPrefix(plain, "+") ||
			strings.EqualFold(plain, "-.inf") {
			return 0, 0, false
		}
	}
	return scalarString, 0, true
}

// numberish says whether some strconv parser might read s: it is a
// conservative superset of Go's integer and float syntaxes (the parsers'
// errors allocate, and quantities such as 128Mi are common).
func numberish(s string) bool {
	if s != "" && (s[0] == '+' || s[0] == '-') {
		s = s[1:]
	}
	switch strings.ToLower(s) {
	case "inf", "infinity", "nan":
		return true
	}
	digits := "0123456789.eE+-"
	if len(s) > 1 && s[0] == '0' {
		switch s[1] {
		case 'x', 'X':
			digits, s = "0123456789abcdefABCDEF.pP+-", s[2:]
		case 'o', 'O', 'b', 'B':
			digits, s = "0123456789", s[2:]
		}
	}
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(digits, s[i]) < 0 {
			return false
		}
	}
	return true
}

// isDecimal matches -?(0|[1-9][0-9]{0,17}).
func isDecimal(s string) bool {
	if s[0] == '-' {
		s = s[1:]
	}
	if s == "0" {
		return true
	}
	return len(s) > 0 && len(s) <= 18 && s[0] != '0' && isDigits(s)
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return len(s) > 0
}
