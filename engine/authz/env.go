package authz

import (
	"sync"

	"github.com/google/cel-go/cel"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/celenv"
)

// Env holds the CEL environments of the two modes, built once per process.
type Env struct {
	envoy, http celenv.Pair
}

var (
	defaultOnce sync.Once
	defaultEnv  *Env
	defaultErr  error
)

// DefaultEnv returns the process-wide environments, building them on first
// use (tens of milliseconds: a compiler builds them only when a set has
// authorization policies).
func DefaultEnv() (*Env, error) {
	defaultOnce.Do(func() { defaultEnv, defaultErr = NewEnv() })
	return defaultEnv, defaultErr
}

// NewEnv builds the environments of Envoy and HTTP policies: celenv's
// authorization environment with the mode's response builders and
// jwt.Decode, as kyverno-authz's NewEnv.
func NewEnv() (*Env, error) {
	build := func(mode []cel.EnvOption) (celenv.Pair, error) {
		return celenv.NewAuthz(func(env *cel.Env) (*cel.Env, error) {
			env, err := env.Extend(append(mode, jwtLibrary()...)...)
			if err != nil {
				return nil, err
			}
			return env.Extend(cel.CustomTypeProvider(tokenProvider{env.CELTypeProvider()}))
		})
	}
	var e Env
	var err error
	if e.envoy, err = build(envoyLibrary()); err != nil {
		return nil, err
	}
	if e.http, err = build(httpLibrary()); err != nil {
		return nil, err
	}
	return &e, nil
}

// pair returns the environment of a mode.
func (e *Env) pair(mode admission.Shape) celenv.Pair {
	if mode == admission.ShapeEnvoy {
		return e.envoy
	}
	return e.http
}
