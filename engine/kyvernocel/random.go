package kyvernocel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"regexp/syntax"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// random library (sdk extensions/cel/libs/random):
//
//	random()         → string matching [0-9a-z]{8}
//	random(pattern)  → a random string matching the regular expression
//	random.random(...)
//
// Generation follows github.com/zach-klippenstein/goregen, which Kyverno uses:
// the pattern is parsed with regexp/syntax and no flags (so no Perl classes
// such as \d), simplified, and each node generates: unbounded repeats (*, +,
// {n,}) up to 4096 times, '.' any rune but newline, anchors and word
// boundaries nothing.

const (
	defaultRandomPattern = "[0-9a-z]{8}"
	maxUnboundedRepeat   = 4096
)

func randomFunctions() []cel.EnvOption {
	overloads := func(suffix string) []cel.FunctionOpt {
		return []cel.FunctionOpt{
			cel.Overload("random_string_"+suffix, []*cel.Type{types.StringType}, types.StringType,
				cel.UnaryBinding(func(arg ref.Val) ref.Val {
					pattern, errVal := toString(arg)
					if errVal != nil {
						return errVal
					}
					out, err := RandomString(pattern)
					if err != nil {
						return types.WrapErr(err)
					}
					return types.String(out)
				})),
			cel.Overload("random_string_default_expr_"+suffix, []*cel.Type{}, types.StringType,
				cel.FunctionBinding(func(...ref.Val) ref.Val {
					out, err := RandomString(defaultRandomPattern)
					if err != nil {
						return types.WrapErr(err)
					}
					return types.String(out)
				})),
		}
	}
	return []cel.EnvOption{
		cel.Function("random", overloads("non_prefixed")...),
		cel.Function("random.random", overloads("prefixed")...),
	}
}

// RandomString generates a random string matching pattern, as goregen's
// Generate does.
func RandomString(pattern string) (string, error) {
	re, err := syntax.Parse(pattern, 0)
	if err != nil {
		return "", err
	}
	gen, err := newRegexGen(re.Simplify())
	if err != nil {
		return "", err
	}
	var b strings.Builder
	gen(&b)
	return b.String(), nil
}

type regexGen func(*strings.Builder)

func newRegexGen(re *syntax.Regexp) (regexGen, error) {
	switch re.Op {
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText,
		syntax.OpEndText, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return func(*strings.Builder) {}, nil
	case syntax.OpLiteral:
		lit := string(re.Rune)
		return func(b *strings.Builder) { b.WriteString(lit) }, nil
	case syntax.OpAnyChar:
		return func(b *strings.Builder) { b.WriteRune(rune(rand.Int32())) }, nil
	case syntax.OpAnyCharNotNL:
		return charClassGen([]rune{1, math.MaxInt32})
	case syntax.OpCharClass:
		return charClassGen(re.Rune)
	case syntax.OpQuest:
		return repeatGen(re, 0, 1)
	case syntax.OpStar:
		return repeatGen(re, 0, maxUnboundedRepeat)
	case syntax.OpPlus:
		return repeatGen(re, 1, maxUnboundedRepeat)
	case syntax.OpRepeat:
		lo, hi := re.Min, re.Max
		if hi == -1 {
			hi = maxUnboundedRepeat
		}
		return repeatGen(re, lo, hi)
	case syntax.OpCapture:
		if len(re.Sub) != 1 {
			return nil, fmt.Errorf("%s expected 1 sub-expression, but got %d: %s", opName(re.Op), len(re.Sub), re)
		}
		return newRegexGen(re.Sub[0])
	case syntax.OpConcat, syntax.OpAlternate:
		gens := make([]regexGen, len(re.Sub))
		for i, sub := range re.Sub {
			g, err := newRegexGen(sub)
			if err != nil {
				kind := "concat"
				if re.Op == syntax.OpAlternate {
					kind = "alternate"
				}
				return nil, fmt.Errorf("error creating generators for %s pattern /%s/\ncaused by %s", kind, re, err)
			}
			gens[i] = g
		}
		if re.Op == syntax.OpConcat {
			return func(b *strings.Builder) {
				for _, g := range gens {
					g(b)
				}
			}, nil
		}
		return func(b *strings.Builder) { gens[rand.IntN(len(gens))](b) }, nil
	}
	return nil, fmt.Errorf("invalid generator pattern: /%s/ as /%s/", re, re.Simplify())
}

func repeatGen(re *syntax.Regexp, lo, hi int) (regexGen, error) {
	if len(re.Sub) != 1 {
		return nil, fmt.Errorf("%s expected 1 sub-expression, but got %d: %s", opName(re.Op), len(re.Sub), re)
	}
	sub, err := newRegexGen(re.Sub[0])
	if err != nil {
		return nil, fmt.Errorf("failed to create generator for subexpression: /%s/\ncaused by %s", re, err)
	}
	return func(b *strings.Builder) {
		n := lo + rand.IntN(hi-lo+1)
		for i := 0; i < n; i++ {
			sub(b)
		}
	}, nil
}

func charClassGen(pairs []rune) (regexGen, error) {
	type span struct {
		start rune
		size  int32
	}
	spans := make([]span, 0, len(pairs)/2)
	var total int32
	for i := 0; i+1 < len(pairs); i += 2 {
		start, end := pairs[i], pairs[i+1]
		if start == 0 {
			// no NUL runes (goregen)
			start = 1
		}
		if end < start {
			continue
		}
		spans = append(spans, span{start, end - start + 1})
		total += end - start + 1
	}
	if total <= 0 {
		// goregen panics here (rand.Int31n(0)); Kyverno reports the panic.
		return nil, fmt.Errorf("invalid argument to Int31n")
	}
	return func(b *strings.Builder) {
		i := rand.Int32N(total)
		for _, s := range spans {
			if i < s.size {
				b.WriteRune(s.start + i)
				return
			}
			i -= s.size
		}
	}, nil
}

func opName(op syntax.Op) string {
	switch op {
	case syntax.OpCapture:
		return "OpCapture"
	case syntax.OpQuest:
		return "OpQuest"
	case syntax.OpStar:
		return "OpStar"
	case syntax.OpPlus:
		return "OpPlus"
	case syntax.OpRepeat:
		return "OpRepeat"
	}
	return fmt.Sprintf("Op(%d)", op)
}
