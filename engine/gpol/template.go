package gpol

import (
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/arbiter-pdp/arbiter/engine/celeval"
)

// Generation templates (spec.generate[].template), as Kyverno 1.19's
// pkg/cel/policies/gpol/template: a YAML value of one or more documents,
// each a resource; with interpolate: cel, `(( expr ))` placeholders are
// CEL expressions — a scalar that is one placeholder takes its value
// (structured results included), placeholders inside a string are
// formatted into it, `\((` is a literal "((". The messages are Kyverno's.

type template struct {
	docs []node
}

type node interface {
	render(st *celeval.State) (any, error)
}

type literalNode struct{ value any }

func (n *literalNode) render(*celeval.State) (any, error) { return deepCopyValue(n.value), nil }

type mappingEntry struct {
	key   string
	value node
}

type mappingNode struct{ entries []mappingEntry }

func (n *mappingNode) render(st *celeval.State) (any, error) {
	m := make(map[string]any, len(n.entries))
	for _, e := range n.entries {
		v, err := e.value.render(st)
		if err != nil {
			return nil, fmt.Errorf("field %q: %w", e.key, err)
		}
		m[e.key] = v
	}
	return m, nil
}

type sequenceNode struct{ items []node }

func (n *sequenceNode) render(st *celeval.State) (any, error) {
	s := make([]any, 0, len(n.items))
	for i, item := range n.items {
		v, err := item.render(st)
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		s = append(s, v)
	}
	return s, nil
}

// spliceNode is a scalar that is one placeholder: its value, whatever its type.
type spliceNode struct {
	prog *celeval.Program
	expr string
}

func (n *spliceNode) render(st *celeval.State) (any, error) {
	out, err := st.Eval(n.prog)
	if err != nil {
		return nil, fmt.Errorf("failed to evaluate placeholder %q: %w", n.expr, err)
	}
	v, err := celValueToNative(out)
	if err != nil {
		return nil, fmt.Errorf("failed to convert placeholder %q result: %w", n.expr, err)
	}
	return v, nil
}

// interpolatedNode is a string with placeholders formatted into it.
type interpolatedNode struct {
	segments []segment
	progs    map[int]*celeval.Program
}

func (n *interpolatedNode) render(st *celeval.State) (any, error) {
	var sb strings.Builder
	for i, s := range n.segments {
		if !s.isExpr {
			sb.WriteString(s.literal)
			continue
		}
		out, err := st.Eval(n.progs[i])
		if err != nil {
			return nil, fmt.Errorf("failed to evaluate placeholder %q: %w", s.expression, err)
		}
		v, err := celValueToNative(out)
		if err != nil {
			return nil, fmt.Errorf("failed to convert placeholder %q result: %w", s.expression, err)
		}
		switch v := v.(type) {
		case string:
			sb.WriteString(v)
		case bool, int64, uint64, float64:
			fmt.Fprintf(&sb, "%v", v)
		default:
			return nil, fmt.Errorf("placeholder %q embedded in a string must evaluate to a scalar, got %T; use a whole-value placeholder for structured results", s.expression, v)
		}
	}
	return sb.String(), nil
}

// compileTemplate compiles a template's value; compile compiles one
// placeholder expression in the policy's environment.
func compileTemplate(tpl *GenerationTemplate, compile func(expr string) (*celeval.Program, error)) (*template, error) {
	c := &templateCompiler{compile: compile, interpolate: tpl.Interpolate == interpolateCEL}
	decoder := yaml.NewDecoder(strings.NewReader(tpl.Value))
	var docs []node
	for {
		var doc yaml.Node
		if err := decoder.Decode(&doc); err != nil {
			if err == io.EOF {
				break
			}
			return nil, fmt.Errorf("failed to parse YAML: %v", err)
		}
		root := &doc
		if root.Kind == yaml.DocumentNode {
			if len(root.Content) == 0 {
				continue
			}
			root = root.Content[0]
		}
		if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
			continue
		}
		n, err := c.compileNode(root)
		if err != nil {
			return nil, err
		}
		if !isMappingRoot(n) {
			return nil, fmt.Errorf("line %d: document must be a mapping describing a resource", root.Line)
		}
		docs = append(docs, n)
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("template must contain at least one YAML document")
	}
	return &template{docs: docs}, nil
}

// Interpolation modes.
const (
	interpolateNone = "none"
	interpolateCEL  = "cel"
)

// render renders the template's documents.
func (t *template) render(st *celeval.State) ([]map[string]any, error) {
	resources := make([]map[string]any, 0, len(t.docs))
	for i, doc := range t.docs {
		v, err := doc.render(st)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		resource, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("document %d: expected a mapping describing a resource, got %T", i+1, v)
		}
		resources = append(resources, resource)
	}
	return resources, nil
}

// templateExpressions are the placeholder expressions of a template value
// (for the namespaced policies' globalContext and http checks).
func templateExpressions(value string) []string {
	var out []string
	decoder := yaml.NewDecoder(strings.NewReader(value))
	for {
		var doc yaml.Node
		if err := decoder.Decode(&doc); err != nil {
			return out
		}
		collectExpressions(&doc, &out)
	}
}

func collectExpressions(n *yaml.Node, out *[]string) {
	if n == nil {
		return
	}
	if n.Kind == yaml.ScalarNode && containsPlaceholder(n.Value) {
		if segments, err := scan(n.Value); err == nil {
			for _, s := range segments {
				if s.isExpr {
					*out = append(*out, s.expression)
				}
			}
		}
	}
	for _, child := range n.Content {
		collectExpressions(child, out)
	}
}

func isMappingRoot(n node) bool {
	switch n := n.(type) {
	case *mappingNode, *spliceNode:
		return true
	case *literalNode:
		_, ok := n.value.(map[string]any)
		return ok
	}
	return false
}

type templateCompiler struct {
	compile     func(expr string) (*celeval.Program, error)
	interpolate bool
}

func (c *templateCompiler) compileNode(n *yaml.Node) (node, error) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if !c.interpolate || !nodeContainsPlaceholder(n) {
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("line %d: %v", n.Line, err)
		}
		return &literalNode{value: normalize(v)}, nil
	}
	switch n.Kind {
	case yaml.MappingNode:
		entries := make([]mappingEntry, 0, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, value := n.Content[i], n.Content[i+1]
			if key.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: only scalar mapping keys are supported", key.Line)
			}
			if containsPlaceholder(key.Value) {
				return nil, fmt.Errorf("line %d: placeholders are not supported in mapping keys; use a whole-value placeholder on the parent field instead (e.g. `labels: (( variables.labels ))`)", key.Line)
			}
			if key.Value == "<<" {
				return nil, fmt.Errorf("line %d: YAML merge keys are not supported in subtrees containing placeholders", key.Line)
			}
			v, err := c.compileNode(value)
			if err != nil {
				return nil, err
			}
			entries = append(entries, mappingEntry{key: key.Value, value: v})
		}
		return &mappingNode{entries: entries}, nil
	case yaml.SequenceNode:
		items := make([]node, 0, len(n.Content))
		for _, item := range n.Content {
			v, err := c.compileNode(item)
			if err != nil {
				return nil, err
			}
			items = append(items, v)
		}
		return &sequenceNode{items: items}, nil
	case yaml.ScalarNode:
		return c.compileScalar(n)
	}
	return nil, fmt.Errorf("line %d: unsupported YAML node kind", n.Line)
}

func (c *templateCompiler) compileScalar(n *yaml.Node) (node, error) {
	segments, err := scan(n.Value)
	if err != nil {
		return nil, fmt.Errorf("line %d: %v", n.Line, err)
	}
	exprs := 0
	for _, s := range segments {
		if s.isExpr {
			exprs++
		}
	}
	if exprs == 0 {
		var sb strings.Builder
		for _, s := range segments {
			sb.WriteString(s.literal)
		}
		return &literalNode{value: sb.String()}, nil
	}
	if exprs == 1 && len(segments) == 1 {
		prog, err := c.compileExpression(n, segments[0].expression)
		if err != nil {
			return nil, err
		}
		return &spliceNode{prog: prog, expr: segments[0].expression}, nil
	}
	progs := make(map[int]*celeval.Program, exprs)
	for i, s := range segments {
		if !s.isExpr {
			continue
		}
		prog, err := c.compileExpression(n, s.expression)
		if err != nil {
			return nil, err
		}
		progs[i] = prog
	}
	return &interpolatedNode{segments: segments, progs: progs}, nil
}

func (c *templateCompiler) compileExpression(n *yaml.Node, expr string) (*celeval.Program, error) {
	prog, err := c.compile(expr)
	if err != nil {
		return nil, fmt.Errorf("line %d: invalid placeholder expression %q: %v", n.Line, expr, err)
	}
	return prog, nil
}

func nodeContainsPlaceholder(n *yaml.Node) bool {
	if n == nil {
		return false
	}
	if n.Kind == yaml.AliasNode {
		return nodeContainsPlaceholder(n.Alias)
	}
	if n.Kind == yaml.ScalarNode && (containsPlaceholder(n.Value) || strings.Contains(n.Value, `\((`)) {
		return true
	}
	for _, child := range n.Content {
		if nodeContainsPlaceholder(child) {
			return true
		}
	}
	return false
}

var structpbValueType = reflect.TypeOf(&structpb.Value{})

func celValueToNative(val ref.Val) (any, error) {
	if types.IsError(val) {
		return nil, fmt.Errorf("%v", val)
	}
	switch val.Type() {
	case types.NullType:
		return nil, nil
	case types.StringType:
		return val.Value().(string), nil
	case types.BoolType:
		return val.Value().(bool), nil
	case types.IntType:
		return val.Value().(int64), nil
	case types.UintType:
		v := val.Value().(uint64)
		if v > math.MaxInt64 {
			return nil, fmt.Errorf("uint value %d overflows the supported integer range", v)
		}
		return int64(v), nil
	case types.DoubleType:
		return val.Value().(float64), nil
	}
	pv, err := val.ConvertToNative(structpbValueType)
	if err != nil {
		return nil, err
	}
	return pv.(*structpb.Value).AsInterface(), nil
}

// normalize makes YAML integers int64, as the engine's objects hold them.
func normalize(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = normalize(e)
		}
	case []any:
		for i, e := range t {
			t[i] = normalize(e)
		}
	case int:
		return int64(t)
	}
	return v
}

func deepCopyValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, item := range v {
			out[k] = deepCopyValue(item)
		}
		return out
	case []any:
		out := make([]any, 0, len(v))
		for _, item := range v {
			out = append(out, deepCopyValue(item))
		}
		return out
	}
	return v
}

// segment is a literal or a placeholder of a scalar.
type segment struct {
	literal    string
	expression string
	isExpr     bool
}

// scan splits a scalar into literals and (( placeholders )).
func scan(s string) ([]segment, error) {
	var segments []segment
	var literal strings.Builder
	flush := func() {
		if literal.Len() > 0 {
			segments = append(segments, segment{literal: literal.String()})
			literal.Reset()
		}
	}
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], `\((`) {
			literal.WriteString("((")
			i += 3
			continue
		}
		if strings.HasPrefix(s[i:], "((") {
			expr, next, err := scanPlaceholder(s, i)
			if err != nil {
				return nil, err
			}
			flush()
			segments = append(segments, segment{expression: expr, isExpr: true})
			i = next
			continue
		}
		literal.WriteByte(s[i])
		i++
	}
	flush()
	return segments, nil
}

func scanPlaceholder(s string, start int) (string, int, error) {
	depth := 0
	var quote byte
	for i := start + 2; i < len(s); i++ {
		c := s[i]
		if quote != 0 {
			switch c {
			case '\\':
				i++
			case quote:
				quote = 0
			}
			continue
		}
		switch c {
		case '"', '\'':
			quote = c
		case '(':
			depth++
		case ')':
			switch {
			case depth > 0:
				depth--
			case i+1 < len(s) && s[i+1] == ')':
				expr := strings.TrimSpace(s[start+2 : i])
				if expr == "" {
					return "", 0, fmt.Errorf("empty placeholder at offset %d", start)
				}
				return expr, i + 2, nil
			default:
				return "", 0, fmt.Errorf("unbalanced parenthesis in placeholder starting at offset %d", start)
			}
		}
	}
	if quote != 0 {
		return "", 0, fmt.Errorf("unterminated string literal in placeholder starting at offset %d", start)
	}
	return "", 0, fmt.Errorf("unterminated placeholder starting at offset %d: missing closing '))'", start)
}

func containsPlaceholder(s string) bool {
	for i := 0; i < len(s); i++ {
		if strings.HasPrefix(s[i:], `\((`) {
			i += 2
			continue
		}
		if strings.HasPrefix(s[i:], "((") {
			return true
		}
	}
	return false
}
