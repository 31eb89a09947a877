package admissionpolicy

import (
	"sync"

	"github.com/google/cel-go/cel"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

var (
	baseOnce  sync.Once
	baseEnv   *environment.EnvSet
	stateless plugincel.Compiler
)

func initBase() {
	baseOnce.Do(func() {
		baseEnv = environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
		stateless = plugincel.NewCompiler(baseEnv)
	})
}

// Base returns the API server's base CEL environment set (the default
// compatibility version), built once.
func Base() *environment.EnvSet {
	initBase()
	return baseEnv
}

// Stateless returns a compiler without variable composition: the one the
// API server validates matchConditions with (they cannot read `variables`).
func Stateless() plugincel.Compiler {
	initBase()
	return stateless
}

// NewCompositedCompiler returns a compiler with variable composition on the
// base environment (one per policy: it accumulates the policy's variables).
func NewCompositedCompiler() (*plugincel.CompositedCompiler, error) {
	return plugincel.NewCompositedCompiler(Base())
}

// Expression is a CEL expression with the types it must evaluate to (a
// plugincel.ExpressionAccessor).
type Expression struct {
	Text    string
	Returns []*cel.Type
}

// GetExpression implements plugincel.ExpressionAccessor.
func (e *Expression) GetExpression() string { return e.Text }

// ReturnTypes implements plugincel.ExpressionAccessor.
func (e *Expression) ReturnTypes() []*cel.Type { return e.Returns }

// NamedExpression is a named expression (a variable, a matchCondition).
type NamedExpression struct {
	Expression
	Name string
}

// GetName implements plugincel.NamedExpressionAccessor.
func (e *NamedExpression) GetName() string { return e.Name }

// Return types of the API server's expression accessors.
var (
	BoolReturn   = []*cel.Type{cel.BoolType}
	StringReturn = []*cel.Type{cel.StringType}
	StringOrNull = []*cel.Type{cel.StringType, cel.NullType}
	AnyReturn    = []*cel.Type{cel.AnyType, cel.DynType}
)

// CELFieldError renders a compilation error as the API server's validation does.
func CELFieldError(f *field.Path, expr string, err *apiservercel.Error) *field.Error {
	switch err.Type {
	case apiservercel.ErrorTypeRequired:
		return field.Required(f, err.Detail)
	case apiservercel.ErrorTypeInvalid:
		return field.Invalid(f, expr, err.Detail)
	}
	return field.InternalError(f, err)
}
