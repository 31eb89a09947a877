package kyvernocel

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A JMESPath (https://jmespath.org/specification.html) evaluator for the
// fieldPath and projections of the Kyverno CLI's globalContextEntries mocks,
// which Kyverno evaluates with its JMESPath engine. It implements the whole
// standard language and its built-in functions; Kyverno's own extension
// functions (to_upper, split, time_*...) are not available and report
// "unknown function".
//
// Values are those of encoding/json: nil, bool, float64, string, []any,
// map[string]any.

// jpSearch compiles and evaluates expr against data.
func jpSearch(expr string, data any) (any, error) {
	n, err := jpCompile(expr)
	if err != nil {
		return nil, err
	}
	return n.eval(data)
}

// ---- lexer ----

type jpTokKind int

const (
	jpEOF jpTokKind = iota
	jpIdent
	jpQuotedIdent
	jpNumber
	jpRawString
	jpLiteral
	jpDot
	jpStar
	jpLBracket
	jpRBracket
	jpFlatten // []
	jpFilter  // [?
	jpLBrace
	jpRBrace
	jpLParen
	jpRParen
	jpComma
	jpColon
	jpPipe
	jpOr
	jpAnd
	jpNot
	jpCurrent
	jpExpref
	jpEQ
	jpNE
	jpLT
	jpLTE
	jpGT
	jpGTE
)

var jpBindingPower = map[jpTokKind]int{
	jpPipe: 1, jpOr: 2, jpAnd: 3,
	jpEQ: 5, jpNE: 5, jpLT: 5, jpLTE: 5, jpGT: 5, jpGTE: 5,
	jpFlatten: 9, jpStar: 20, jpFilter: 21, jpDot: 40, jpNot: 45,
	jpLBrace: 50, jpLBracket: 55, jpLParen: 60,
}

type jpToken struct {
	kind  jpTokKind
	text  string
	value any // literal value, number
	pos   int
}

func jpLex(s string) ([]jpToken, error) {
	var toks []jpToken
	i := 0
	for i < len(s) {
		c := s[i]
		start := i
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
			continue
		case c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z'):
			for i < len(s) && (s[i] == '_' || ('a' <= s[i] && s[i] <= 'z') || ('A' <= s[i] && s[i] <= 'Z') || ('0' <= s[i] && s[i] <= '9')) {
				i++
			}
			toks = append(toks, jpToken{kind: jpIdent, text: s[start:i], pos: start})
			continue
		case c == '-' || ('0' <= c && c <= '9'):
			i++
			for i < len(s) && '0' <= s[i] && s[i] <= '9' {
				i++
			}
			n, err := strconv.Atoi(s[start:i])
			if err != nil {
				return nil, fmt.Errorf("invalid number %q at %d", s[start:i], start)
			}
			toks = append(toks, jpToken{kind: jpNumber, text: s[start:i], value: n, pos: start})
			continue
		case c == '"':
			end, err := jpScanDelimited(s, i, '"')
			if err != nil {
				return nil, err
			}
			var v string
			if err := json.Unmarshal([]byte(s[i:end]), &v); err != nil {
				return nil, fmt.Errorf("invalid quoted identifier at %d: %v", start, err)
			}
			toks = append(toks, jpToken{kind: jpQuotedIdent, text: v, pos: start})
			i = end
			continue
		case c == '\'':
			end, err := jpScanDelimited(s, i, '\'')
			if err != nil {
				return nil, err
			}
			v := strings.ReplaceAll(s[i+1:end-1], `\'`, `'`)
			toks = append(toks, jpToken{kind: jpRawString, text: v, value: v, pos: start})
			i = end
			continue
		case c == '`':
			end, err := jpScanDelimited(s, i, '`')
			if err != nil {
				return nil, err
			}
			raw := strings.ReplaceAll(s[i+1:end-1], "\\`", "`")
			var v any
			if err := json.Unmarshal([]byte(raw), &v); err != nil {
				// legacy: an unquoted string literal
				q, qerr := json.Marshal(strings.TrimSpace(raw))
				if qerr != nil || json.Unmarshal(q, &v) != nil {
					return nil, fmt.Errorf("invalid JSON literal at %d: %v", start, err)
				}
			}
			toks = append(toks, jpToken{kind: jpLiteral, text: raw, value: v, pos: start})
			i = end
			continue
		}
		two := ""
		if i+1 < len(s) {
			two = s[i : i+2]
		}
		var kind jpTokKind
		width := 1
		switch {
		case two == "[]":
			kind, width = jpFlatten, 2
		case two == "[?":
			kind, width = jpFilter, 2
		case two == "||":
			kind, width = jpOr, 2
		case two == "&&":
			kind, width = jpAnd, 2
		case two == "==":
			kind, width = jpEQ, 2
		case two == "!=":
			kind, width = jpNE, 2
		case two == "<=":
			kind, width = jpLTE, 2
		case two == ">=":
			kind, width = jpGTE, 2
		default:
			switch c {
			case '.':
				kind = jpDot
			case '*':
				kind = jpStar
			case '[':
				kind = jpLBracket
			case ']':
				kind = jpRBracket
			case '{':
				kind = jpLBrace
			case '}':
				kind = jpRBrace
			case '(':
				kind = jpLParen
			case ')':
				kind = jpRParen
			case ',':
				kind = jpComma
			case ':':
				kind = jpColon
			case '|':
				kind = jpPipe
			case '!':
				kind = jpNot
			case '@':
				kind = jpCurrent
			case '&':
				kind = jpExpref
			case '<':
				kind = jpLT
			case '>':
				kind = jpGT
			default:
				r, _ := utf8.DecodeRuneInString(s[i:])
				return nil, fmt.Errorf("unexpected character %q at %d", r, i)
			}
		}
		toks = append(toks, jpToken{kind: kind, text: s[i : i+width], pos: i})
		i += width
	}
	return append(toks, jpToken{kind: jpEOF, pos: len(s)}), nil
}

// jpScanDelimited returns the index just after the closing delimiter of the
// token starting at s[i] (which is the delimiter), honouring backslashes.
func jpScanDelimited(s string, i int, delim byte) (int, error) {
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case delim:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unclosed delimiter %c at %d", delim, i)
}

// ---- AST ----

type jpNodeKind int

const (
	jpnIdentity jpNodeKind = iota
	jpnField
	jpnLiteral
	jpnSubexpr
	jpnIndex
	jpnSlice
	jpnProjection
	jpnValueProjection
	jpnFilterProjection
	jpnFlatten
	jpnPipe
	jpnOr
	jpnAnd
	jpnNot
	jpnCompare
	jpnMultiList
	jpnMultiHash
	jpnFunction
	jpnExpref
	jpnIndexExpr
)

type jpNode struct {
	kind     jpNodeKind
	name     string // field, function, hash key
	value    any    // literal; index int; slice [3]*int
	op       jpTokKind
	children []*jpNode
	keys     []string // multi-select hash keys
}

// ---- parser ----

type jpParser struct {
	toks []jpToken
	i    int
	expr string
}

func jpCompile(expr string) (*jpNode, error) {
	toks, err := jpLex(expr)
	if err != nil {
		return nil, fmt.Errorf("jmespath %q: %w", expr, err)
	}
	p := &jpParser{toks: toks, expr: expr}
	n, err := p.parse(0)
	if err != nil {
		return nil, fmt.Errorf("jmespath %q: %w", expr, err)
	}
	if p.peek() != jpEOF {
		return nil, fmt.Errorf("jmespath %q: unexpected token %q at %d", expr, p.cur().text, p.cur().pos)
	}
	return n, nil
}

func (p *jpParser) cur() jpToken    { return p.toks[p.i] }
func (p *jpParser) peek() jpTokKind { return p.toks[p.i].kind }
func (p *jpParser) peekAt(k int) jpTokKind {
	if p.i+k < len(p.toks) {
		return p.toks[p.i+k].kind
	}
	return jpEOF
}
func (p *jpParser) advance() jpToken {
	t := p.toks[p.i]
	if p.i < len(p.toks)-1 {
		p.i++
	}
	return t
}

func (p *jpParser) expect(k jpTokKind) error {
	if p.peek() != k {
		t := p.cur()
		if t.kind == jpEOF {
			return errors.New("unexpected end of expression")
		}
		return fmt.Errorf("unexpected token %q at %d", t.text, t.pos)
	}
	p.advance()
	return nil
}

func (p *jpParser) parse(bp int) (*jpNode, error) {
	left, err := p.nud(p.advance())
	if err != nil {
		return nil, err
	}
	for bp < jpBindingPower[p.peek()] {
		left, err = p.led(p.advance(), left)
		if err != nil {
			return nil, err
		}
	}
	return left, nil
}

var jpIdentityNode = &jpNode{kind: jpnIdentity}

func (p *jpParser) nud(t jpToken) (*jpNode, error) {
	switch t.kind {
	case jpLiteral, jpRawString:
		return &jpNode{kind: jpnLiteral, value: t.value}, nil
	case jpIdent:
		return &jpNode{kind: jpnField, name: t.text}, nil
	case jpQuotedIdent:
		if p.peek() == jpLParen {
			return nil, fmt.Errorf("quoted identifier %q cannot be a function name", t.text)
		}
		return &jpNode{kind: jpnField, name: t.text}, nil
	case jpStar:
		right, err := p.projectionRHS(jpBindingPower[jpStar])
		if err != nil {
			return nil, err
		}
		return &jpNode{kind: jpnValueProjection, children: []*jpNode{jpIdentityNode, right}}, nil
	case jpFilter:
		return p.filter(jpIdentityNode)
	case jpLBrace:
		return p.multiHash()
	case jpFlatten:
		right, err := p.projectionRHS(jpBindingPower[jpFlatten])
		if err != nil {
			return nil, err
		}
		return &jpNode{kind: jpnProjection, children: []*jpNode{{kind: jpnFlatten, children: []*jpNode{jpIdentityNode}}, right}}, nil
	case jpLBracket:
		switch p.peek() {
		case jpNumber, jpColon:
			idx, err := p.indexOrSlice()
			if err != nil {
				return nil, err
			}
			return p.indexToProjection(jpIdentityNode, idx)
		case jpStar:
			if p.peekAt(1) == jpRBracket {
				p.advance()
				p.advance()
				right, err := p.projectionRHS(jpBindingPower[jpStar])
				if err != nil {
					return nil, err
				}
				return &jpNode{kind: jpnProjection, children: []*jpNode{jpIdentityNode, right}}, nil
			}
		}
		return p.multiList()
	case jpCurrent:
		return jpIdentityNode, nil
	case jpExpref:
		e, err := p.parse(jpBindingPower[jpExpref])
		if err != nil {
			return nil, err
		}
		return &jpNode{kind: jpnExpref, children: []*jpNode{e}}, nil
	case jpNot:
		e, err := p.parse(jpBindingPower[jpNot])
		if err != nil {
			return nil, err
		}
		return &jpNode{kind: jpnNot, children: []*jpNode{e}}, nil
	case jpLParen:
		e, err := p.parse(0)
		if err != nil {
			return nil, err
		}
		return e, p.expect(jpRParen)
	case jpEOF:
		return nil, errors.New("unexpected end of expression")
	}
	return nil, fmt.Errorf("unexpected token %q at %d", t.text, t.pos)
}

func (p *jpParser) led(t jpToken, left *jpNode) (*jpNode, error) {
	switch t.kind {
	case jpDot:
		if p.peek() == jpStar {
			p.advance()
			right, err := p.projectionRHS(jpBindingPower[jpDot])
			if err != nil {
				return nil, err
			}
			return &jpNode{kind: jpnValueProjection, children: []*jpNode{left, right}}, nil
		}
		right, err := p.dotRHS(jpBindingPower[jpDot])
		if err != nil {
			return nil, err
		}
		return &jpNode{kind: jpnSubexpr, children: []*jpNode{left, right}}, nil
	case jpPipe, jpOr, jpAnd:
		right, err := p.parse(jpBindingPower[t.kind])
		if err != nil {
			return nil, err
		}
		kind := map[jpTokKind]jpNodeKind{jpPipe: jpnPipe, jpOr: jpnOr, jpAnd: jpnAnd}[t.kind]
		return &jpNode{kind: kind, children: []*jpNode{left, right}}, nil
	case jpEQ, jpNE, jpLT, jpLTE, jpGT, jpGTE:
		right, err := p.parse(jpBindingPower[t.kind])
		if err != nil {
			return nil, err
		}
		return &jpNode{kind: jpnCompare, op: t.kind, children: []*jpNode{left, right}}, nil
	case jpLParen:
		if left.kind != jpnField {
			return nil, fmt.Errorf("invalid function call at %d", t.pos)
		}
		var args []*jpNode
		for p.peek() != jpRParen {
			a, err := p.parse(0)
			if err != nil {
				return nil, err
			}
			args = append(args, a)
			if p.peek() == jpComma {
				p.advance()
			} else if p.peek() != jpRParen {
				return nil, fmt.Errorf("unexpected token %q at %d", p.cur().text, p.cur().pos)
			}
		}
		p.advance()
		if _, ok := jpFunctions[left.name]; !ok {
			return nil, fmt.Errorf("unknown function: %s", left.name)
		}
		return &jpNode{kind: jpnFunction, name: left.name, children: args}, nil
	case jpFilter:
		return p.filter(left)
	case jpFlatten:
		right, err := p.projectionRHS(jpBindingPower[jpFlatten])
		if err != nil {
			return nil, err
		}
		return &jpNode{kind: jpnProjection, children: []*jpNode{{kind: jpnFlatten, children: []*jpNode{left}}, right}}, nil
	case jpLBracket:
		switch p.peek() {
		case jpNumber, jpColon:
			idx, err := p.indexOrSlice()
			if err != nil {
				return nil, err
			}
			return p.indexToProjection(left, idx)
		case jpStar:
			p.advance()
			if err := p.expect(jpRBracket); err != nil {
				return nil, err
			}
			right, err := p.projectionRHS(jpBindingPower[jpStar])
			if err != nil {
				return nil, err
			}
			return &jpNode{kind: jpnProjection, children: []*jpNode{left, right}}, nil
		}
		return nil, fmt.Errorf("unexpected token %q at %d", p.cur().text, p.cur().pos)
	}
	return nil, fmt.Errorf("unexpected token %q at %d", t.text, t.pos)
}

// indexOrSlice parses after '[': a number then ']', or a slice.
func (p *jpParser) indexOrSlice() (*jpNode, error) {
	if p.peek() == jpNumber && p.peekAt(1) == jpRBracket {
		n := p.advance().value.(int)
		p.advance()
		return &jpNode{kind: jpnIndex, value: n}, nil
	}
	var parts [3]*int
	idx := 0
	for p.peek() != jpRBracket {
		switch p.peek() {
		case jpColon:
			idx++
			if idx > 2 {
				return nil, fmt.Errorf("too many colons in slice at %d", p.cur().pos)
			}
			p.advance()
		case jpNumber:
			n := p.advance().value.(int)
			parts[idx] = &n
		default:
			return nil, fmt.Errorf("unexpected token %q at %d", p.cur().text, p.cur().pos)
		}
	}
	p.advance()
	return &jpNode{kind: jpnSlice, value: parts}, nil
}

func (p *jpParser) indexToProjection(left, idx *jpNode) (*jpNode, error) {
	if idx.kind == jpnIndex {
		return &jpNode{kind: jpnIndexExpr, children: []*jpNode{left, idx}}, nil
	}
	right, err := p.projectionRHS(jpBindingPower[jpStar])
	if err != nil {
		return nil, err
	}
	return &jpNode{kind: jpnProjection, children: []*jpNode{{kind: jpnIndexExpr, children: []*jpNode{left, idx}}, right}}, nil
}

func (p *jpParser) filter(left *jpNode) (*jpNode, error) {
	cond, err := p.parse(0)
	if err != nil {
		return nil, err
	}
	if err := p.expect(jpRBracket); err != nil {
		return nil, err
	}
	var right *jpNode
	if p.peek() == jpFlatten {
		right = jpIdentityNode
	} else if right, err = p.projectionRHS(jpBindingPower[jpFilter]); err != nil {
		return nil, err
	}
	return &jpNode{kind: jpnFilterProjection, children: []*jpNode{left, right, cond}}, nil
}

func (p *jpParser) projectionRHS(bp int) (*jpNode, error) {
	switch {
	case jpBindingPower[p.peek()] < 10:
		return jpIdentityNode, nil
	case p.peek() == jpLBracket, p.peek() == jpFilter:
		return p.parse(bp)
	case p.peek() == jpDot:
		p.advance()
		return p.dotRHS(bp)
	}
	return nil, fmt.Errorf("unexpected token %q at %d", p.cur().text, p.cur().pos)
}

func (p *jpParser) dotRHS(bp int) (*jpNode, error) {
	switch p.peek() {
	case jpIdent, jpQuotedIdent, jpStar:
		return p.parse(bp)
	case jpLBracket:
		p.advance()
		return p.multiList()
	case jpLBrace:
		p.advance()
		return p.multiHash()
	}
	return nil, fmt.Errorf("unexpected token %q at %d", p.cur().text, p.cur().pos)
}

func (p *jpParser) multiList() (*jpNode, error) {
	n := &jpNode{kind: jpnMultiList}
	for {
		e, err := p.parse(0)
		if err != nil {
			return nil, err
		}
		n.children = append(n.children, e)
		if p.peek() == jpRBracket {
			p.advance()
			return n, nil
		}
		if err := p.expect(jpComma); err != nil {
			return nil, err
		}
	}
}

func (p *jpParser) multiHash() (*jpNode, error) {
	n := &jpNode{kind: jpnMultiHash}
	for {
		k := p.advance()
		if k.kind != jpIdent && k.kind != jpQuotedIdent {
			return nil, fmt.Errorf("expected a key name at %d", k.pos)
		}
		if err := p.expect(jpColon); err != nil {
			return nil, err
		}
		v, err := p.parse(0)
		if err != nil {
			return nil, err
		}
		n.keys = append(n.keys, k.text)
		n.children = append(n.children, v)
		if p.peek() == jpRBrace {
			p.advance()
			return n, nil
		}
		if err := p.expect(jpComma); err != nil {
			return nil, err
		}
	}
}

// ---- evaluation ----

func (n *jpNode) eval(v any) (any, error) {
	switch n.kind {
	case jpnIdentity:
		return v, nil
	case jpnLiteral:
		return n.value, nil
	case jpnField:
		if m, ok := v.(map[string]any); ok {
			return m[n.name], nil
		}
		return nil, nil
	case jpnSubexpr, jpnPipe:
		l, err := n.children[0].eval(v)
		if err != nil {
			return nil, err
		}
		return n.children[1].eval(l)
	case jpnIndexExpr:
		l, err := n.children[0].eval(v)
		if err != nil {
			return nil, err
		}
		return n.children[1].eval(l)
	case jpnIndex:
		list, ok := v.([]any)
		if !ok {
			return nil, nil
		}
		i := n.value.(int)
		if i < 0 {
			i += len(list)
		}
		if i < 0 || i >= len(list) {
			return nil, nil
		}
		return list[i], nil
	case jpnSlice:
		list, ok := v.([]any)
		if !ok {
			return nil, nil
		}
		return jpSlice(list, n.value.([3]*int))
	case jpnFlatten:
		l, err := n.children[0].eval(v)
		if err != nil {
			return nil, err
		}
		list, ok := l.([]any)
		if !ok {
			return nil, nil
		}
		out := make([]any, 0, len(list))
		for _, e := range list {
			if sub, ok := e.([]any); ok {
				out = append(out, sub...)
			} else {
				out = append(out, e)
			}
		}
		return out, nil
	case jpnProjection, jpnValueProjection, jpnFilterProjection:
		l, err := n.children[0].eval(v)
		if err != nil {
			return nil, err
		}
		var elems []any
		if n.kind == jpnValueProjection {
			m, ok := l.(map[string]any)
			if !ok {
				return nil, nil
			}
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				elems = append(elems, m[k])
			}
		} else {
			list, ok := l.([]any)
			if !ok {
				return nil, nil
			}
			elems = list
		}
		out := make([]any, 0, len(elems))
		for _, e := range elems {
			if n.kind == jpnFilterProjection {
				c, err := n.children[2].eval(e)
				if err != nil {
					return nil, err
				}
				if !jpTruthy(c) {
					continue
				}
			}
			r, err := n.children[1].eval(e)
			if err != nil {
				return nil, err
			}
			if r != nil {
				out = append(out, r)
			}
		}
		return out, nil
	case jpnOr, jpnAnd:
		l, err := n.children[0].eval(v)
		if err != nil {
			return nil, err
		}
		if jpTruthy(l) == (n.kind == jpnOr) {
			return l, nil
		}
		return n.children[1].eval(v)
	case jpnNot:
		l, err := n.children[0].eval(v)
		if err != nil {
			return nil, err
		}
		return !jpTruthy(l), nil
	case jpnCompare:
		l, err := n.children[0].eval(v)
		if err != nil {
			return nil, err
		}
		r, err := n.children[1].eval(v)
		if err != nil {
			return nil, err
		}
		switch n.op {
		case jpEQ:
			return jpEqual(l, r), nil
		case jpNE:
			return !jpEqual(l, r), nil
		}
		lf, lok := l.(float64)
		rf, rok := r.(float64)
		if !lok || !rok {
			return nil, nil
		}
		switch n.op {
		case jpLT:
			return lf < rf, nil
		case jpLTE:
			return lf <= rf, nil
		case jpGT:
			return lf > rf, nil
		default:
			return lf >= rf, nil
		}
	case jpnMultiList:
		if v == nil {
			return nil, nil
		}
		out := make([]any, len(n.children))
		for i, c := range n.children {
			r, err := c.eval(v)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	case jpnMultiHash:
		if v == nil {
			return nil, nil
		}
		out := make(map[string]any, len(n.children))
		for i, c := range n.children {
			r, err := c.eval(v)
			if err != nil {
				return nil, err
			}
			out[n.keys[i]] = r
		}
		return out, nil
	case jpnExpref:
		return jpExprefVal{n.children[0]}, nil
	case jpnFunction:
		args := make([]any, len(n.children))
		for i, c := range n.children {
			r, err := c.eval(v)
			if err != nil {
				return nil, err
			}
			args[i] = r
		}
		return jpFunctions[n.name](args)
	}
	return nil, fmt.Errorf("unknown node %d", n.kind)
}

type jpExprefVal struct{ n *jpNode }

func jpSlice(list []any, parts [3]*int) (any, error) {
	step := 1
	if parts[2] != nil {
		step = *parts[2]
		if step == 0 {
			return nil, errors.New("slice step cannot be 0")
		}
	}
	length := len(list)
	clamp := func(v int) int {
		if v < 0 {
			v += length
			if v < 0 {
				if step < 0 {
					return -1
				}
				return 0
			}
		} else if v >= length {
			if step < 0 {
				return length - 1
			}
			return length
		}
		return v
	}
	var start, stop int
	if parts[0] == nil {
		if step < 0 {
			start = length - 1
		} else {
			start = 0
		}
	} else {
		start = clamp(*parts[0])
	}
	if parts[1] == nil {
		if step < 0 {
			stop = -1
		} else {
			stop = length
		}
	} else {
		stop = clamp(*parts[1])
	}
	out := []any{}
	if step > 0 {
		for i := start; i < stop; i += step {
			out = append(out, list[i])
		}
	} else {
		for i := start; i > stop; i += step {
			out = append(out, list[i])
		}
	}
	return out, nil
}

func jpTruthy(v any) bool {
	switch t := v.(type) {
	case nil:
		return false
	case bool:
		return t
	case string:
		return t != ""
	case []any:
		return len(t) > 0
	case map[string]any:
		return len(t) > 0
	}
	return true
}

func jpEqual(a, b any) bool { return reflect.DeepEqual(a, b) }

func jpTypeOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	case jpExprefVal:
		return "expref"
	}
	return "unknown"
}

// ---- functions ----

type jpFunc func(args []any) (any, error)

var jpFunctions map[string]jpFunc

func init() {
	jpFunctions = map[string]jpFunc{
		"abs":         jpMath1("abs", math.Abs),
		"ceil":        jpMath1("ceil", math.Ceil),
		"floor":       jpMath1("floor", math.Floor),
		"avg":         jpAvg,
		"sum":         jpSum,
		"contains":    jpContains,
		"starts_with": jpStrings2("starts_with", strings.HasPrefix),
		"ends_with":   jpStrings2("ends_with", strings.HasSuffix),
		"join":        jpJoin,
		"keys":        jpKeys,
		"values":      jpValues,
		"length":      jpLength,
		"map":         jpMap,
		"max":         jpMinMax("max", 1),
		"min":         jpMinMax("min", -1),
		"max_by":      jpMinMaxBy("max_by", 1),
		"min_by":      jpMinMaxBy("min_by", -1),
		"merge":       jpMerge,
		"not_null":    jpNotNull,
		"reverse":     jpReverse,
		"sort":        jpSort,
		"sort_by":     jpSortBy,
		"to_array":    jpToArray,
		"to_number":   jpToNumber,
		"to_string":   jpToString,
		"type":        jpType,
	}
}

func jpArgs(name string, args []any, n int) error {
	if len(args) != n {
		return fmt.Errorf("invalid arity for %s(): expected %d, got %d", name, n, len(args))
	}
	return nil
}

func jpArgErr(name string, want string, got any) error {
	return fmt.Errorf("invalid type for %s(): expected %s, got %s", name, want, jpTypeOf(got))
}

func jpMath1(name string, f func(float64) float64) jpFunc {
	return func(args []any) (any, error) {
		if err := jpArgs(name, args, 1); err != nil {
			return nil, err
		}
		x, ok := args[0].(float64)
		if !ok {
			return nil, jpArgErr(name, "number", args[0])
		}
		return f(x), nil
	}
}

func jpNumbers(name string, v any) ([]float64, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, jpArgErr(name, "array[number]", v)
	}
	out := make([]float64, len(list))
	for i, e := range list {
		f, ok := e.(float64)
		if !ok {
			return nil, jpArgErr(name, "array[number]", v)
		}
		out[i] = f
	}
	return out, nil
}

func jpSum(args []any) (any, error) {
	if err := jpArgs("sum", args, 1); err != nil {
		return nil, err
	}
	nums, err := jpNumbers("sum", args[0])
	if err != nil {
		return nil, err
	}
	s := 0.0
	for _, f := range nums {
		s += f
	}
	return s, nil
}

func jpAvg(args []any) (any, error) {
	if err := jpArgs("avg", args, 1); err != nil {
		return nil, err
	}
	nums, err := jpNumbers("avg", args[0])
	if err != nil {
		return nil, err
	}
	if len(nums) == 0 {
		return nil, nil
	}
	s := 0.0
	for _, f := range nums {
		s += f
	}
	return s / float64(len(nums)), nil
}

func jpContains(args []any) (any, error) {
	if err := jpArgs("contains", args, 2); err != nil {
		return nil, err
	}
	switch s := args[0].(type) {
	case string:
		sub, ok := args[1].(string)
		if !ok {
			return false, nil
		}
		return strings.Contains(s, sub), nil
	case []any:
		for _, e := range s {
			if jpEqual(e, args[1]) {
				return true, nil
			}
		}
		return false, nil
	}
	return nil, jpArgErr("contains", "array|string", args[0])
}

func jpStrings2(name string, f func(string, string) bool) jpFunc {
	return func(args []any) (any, error) {
		if err := jpArgs(name, args, 2); err != nil {
			return nil, err
		}
		a, ok := args[0].(string)
		if !ok {
			return nil, jpArgErr(name, "string", args[0])
		}
		b, ok := args[1].(string)
		if !ok {
			return nil, jpArgErr(name, "string", args[1])
		}
		return f(a, b), nil
	}
}

func jpJoin(args []any) (any, error) {
	if err := jpArgs("join", args, 2); err != nil {
		return nil, err
	}
	sep, ok := args[0].(string)
	if !ok {
		return nil, jpArgErr("join", "string", args[0])
	}
	list, ok := args[1].([]any)
	if !ok {
		return nil, jpArgErr("join", "array[string]", args[1])
	}
	parts := make([]string, len(list))
	for i, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, jpArgErr("join", "array[string]", args[1])
		}
		parts[i] = s
	}
	return strings.Join(parts, sep), nil
}

func jpSortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func jpKeys(args []any) (any, error) {
	if err := jpArgs("keys", args, 1); err != nil {
		return nil, err
	}
	m, ok := args[0].(map[string]any)
	if !ok {
		return nil, jpArgErr("keys", "object", args[0])
	}
	out := []any{}
	for _, k := range jpSortedKeys(m) {
		out = append(out, k)
	}
	return out, nil
}

func jpValues(args []any) (any, error) {
	if err := jpArgs("values", args, 1); err != nil {
		return nil, err
	}
	m, ok := args[0].(map[string]any)
	if !ok {
		return nil, jpArgErr("values", "object", args[0])
	}
	out := []any{}
	for _, k := range jpSortedKeys(m) {
		out = append(out, m[k])
	}
	return out, nil
}

func jpLength(args []any) (any, error) {
	if err := jpArgs("length", args, 1); err != nil {
		return nil, err
	}
	switch v := args[0].(type) {
	case string:
		return float64(utf8.RuneCountInString(v)), nil
	case []any:
		return float64(len(v)), nil
	case map[string]any:
		return float64(len(v)), nil
	}
	return nil, jpArgErr("length", "string|array|object", args[0])
}

func jpMap(args []any) (any, error) {
	if err := jpArgs("map", args, 2); err != nil {
		return nil, err
	}
	e, ok := args[0].(jpExprefVal)
	if !ok {
		return nil, jpArgErr("map", "expref", args[0])
	}
	list, ok := args[1].([]any)
	if !ok {
		return nil, jpArgErr("map", "array", args[1])
	}
	out := make([]any, len(list))
	for i, x := range list {
		r, err := e.n.eval(x)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

// jpCompare orders two numbers or two strings.
func jpCompare(a, b any) (int, bool) {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		if !ok {
			return 0, false
		}
		switch {
		case x < y:
			return -1, true
		case x > y:
			return 1, true
		}
		return 0, true
	case string:
		y, ok := b.(string)
		if !ok {
			return 0, false
		}
		return strings.Compare(x, y), true
	}
	return 0, false
}

func jpMinMax(name string, sign int) jpFunc {
	return func(args []any) (any, error) {
		if err := jpArgs(name, args, 1); err != nil {
			return nil, err
		}
		list, ok := args[0].([]any)
		if !ok {
			return nil, jpArgErr(name, "array[number]|array[string]", args[0])
		}
		var best any
		for _, e := range list {
			if best == nil {
				if _, ok := jpCompare(e, e); !ok {
					return nil, jpArgErr(name, "array[number]|array[string]", args[0])
				}
				best = e
				continue
			}
			c, ok := jpCompare(e, best)
			if !ok {
				return nil, jpArgErr(name, "array[number]|array[string]", args[0])
			}
			if c*sign > 0 {
				best = e
			}
		}
		return best, nil
	}
}

func jpMinMaxBy(name string, sign int) jpFunc {
	return func(args []any) (any, error) {
		if err := jpArgs(name, args, 2); err != nil {
			return nil, err
		}
		list, ok := args[0].([]any)
		if !ok {
			return nil, jpArgErr(name, "array", args[0])
		}
		e, ok := args[1].(jpExprefVal)
		if !ok {
			return nil, jpArgErr(name, "expref", args[1])
		}
		var best, bestKey any
		for _, x := range list {
			k, err := e.n.eval(x)
			if err != nil {
				return nil, err
			}
			if _, ok := jpCompare(k, k); !ok {
				return nil, jpArgErr(name, "expression of type number|string", k)
			}
			if bestKey == nil {
				best, bestKey = x, k
				continue
			}
			c, ok := jpCompare(k, bestKey)
			if !ok {
				return nil, jpArgErr(name, "expression of consistent type", k)
			}
			if c*sign > 0 {
				best, bestKey = x, k
			}
		}
		return best, nil
	}
}

func jpMerge(args []any) (any, error) {
	out := map[string]any{}
	for _, a := range args {
		m, ok := a.(map[string]any)
		if !ok {
			return nil, jpArgErr("merge", "object", a)
		}
		for k, v := range m {
			out[k] = v
		}
	}
	return out, nil
}

func jpNotNull(args []any) (any, error) {
	for _, a := range args {
		if a != nil {
			return a, nil
		}
	}
	return nil, nil
}

func jpReverse(args []any) (any, error) {
	if err := jpArgs("reverse", args, 1); err != nil {
		return nil, err
	}
	switch v := args[0].(type) {
	case string:
		r := []rune(v)
		for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
			r[i], r[j] = r[j], r[i]
		}
		return string(r), nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[len(v)-1-i] = e
		}
		return out, nil
	}
	return nil, jpArgErr("reverse", "array|string", args[0])
}

func jpSort(args []any) (any, error) {
	if err := jpArgs("sort", args, 1); err != nil {
		return nil, err
	}
	list, ok := args[0].([]any)
	if !ok {
		return nil, jpArgErr("sort", "array[number]|array[string]", args[0])
	}
	out := append([]any(nil), list...)
	var bad bool
	sort.SliceStable(out, func(i, j int) bool {
		c, ok := jpCompare(out[i], out[j])
		if !ok {
			bad = true
		}
		return c < 0
	})
	if bad {
		return nil, jpArgErr("sort", "array[number]|array[string]", args[0])
	}
	return out, nil
}

func jpSortBy(args []any) (any, error) {
	if err := jpArgs("sort_by", args, 2); err != nil {
		return nil, err
	}
	list, ok := args[0].([]any)
	if !ok {
		return nil, jpArgErr("sort_by", "array", args[0])
	}
	e, ok := args[1].(jpExprefVal)
	if !ok {
		return nil, jpArgErr("sort_by", "expref", args[1])
	}
	keys := make([]any, len(list))
	for i, x := range list {
		k, err := e.n.eval(x)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	idx := make([]int, len(list))
	for i := range idx {
		idx[i] = i
	}
	var bad bool
	sort.SliceStable(idx, func(a, b int) bool {
		c, ok := jpCompare(keys[idx[a]], keys[idx[b]])
		if !ok {
			bad = true
		}
		return c < 0
	})
	if bad {
		return nil, jpArgErr("sort_by", "expression of type number|string", nil)
	}
	out := make([]any, len(list))
	for i, j := range idx {
		out[i] = list[j]
	}
	return out, nil
}

func jpToArray(args []any) (any, error) {
	if err := jpArgs("to_array", args, 1); err != nil {
		return nil, err
	}
	if l, ok := args[0].([]any); ok {
		return l, nil
	}
	return []any{args[0]}, nil
}

func jpToNumber(args []any) (any, error) {
	if err := jpArgs("to_number", args, 1); err != nil {
		return nil, err
	}
	switch v := args[0].(type) {
	case float64:
		return v, nil
	case string:
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, nil
		}
		return f, nil
	}
	return nil, nil
}

func jpToString(args []any) (any, error) {
	if err := jpArgs("to_string", args, 1); err != nil {
		return nil, err
	}
	if s, ok := args[0].(string); ok {
		return s, nil
	}
	b, err := json.Marshal(args[0])
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

func jpType(args []any) (any, error) {
	if err := jpArgs("type", args, 1); err != nil {
		return nil, err
	}
	return jpTypeOf(args[0]), nil
}
