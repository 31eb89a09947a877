package celenv

import (
	"fmt"

	"github.com/google/cel-go/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
)

// NewAuthz builds the environment pair of the Kyverno Authz Server's
// authorization policies (a ValidatingPolicy in Envoy or HTTP mode), as
// kyverno-authz builds it (pkg/cel/env.go): the cel-go extensions and
// Kubernetes libraries of the admission environment (CompatOptions, on
// the Kubernetes base environment, with its cost limits), `object` (the
// CheckRequest, as JSON) and `variables`, Kyverno's context libraries
// (http.Get/Post, resource.*, image and image data, and the pure ones),
// then what extend adds to both builds — the mode's response builders and
// jwt. There is no oldObject, request, namespaceObject or exceptions.
func NewAuthz(extend func(*cel.Env) (*cel.Env, error)) (Pair, error) {
	opts := append(CompatOptions(),
		cel.Variable(ObjectVar, cel.DynType),
		cel.Variable(VariablesVar, VariablesType),
	)
	libs := kyvernocel.Libraries(kyvernocel.Options{})

	base := environment.MustBaseEnvSet(compilerVersion)
	extended, err := base.Extend(
		environment.VersionedOptions{IntroducedVersion: compilerVersion, EnvOptions: opts},
		environment.VersionedOptions{IntroducedVersion: compilerVersion, EnvOptions: libs},
	)
	if err != nil {
		return Pair{}, err
	}
	tracked, err := extended.Env(environment.StoredExpressions)
	if err != nil {
		return Pair{}, err
	}
	if tracked, err = extend(tracked); err != nil {
		return Pair{}, err
	}

	fast, err := cel.NewEnv(kubernetesStoredOptions()...)
	if err != nil {
		return Pair{}, fmt.Errorf("building the untracked environment: %w", err)
	}
	if fast, err = fast.Extend(opts...); err != nil {
		return Pair{}, fmt.Errorf("building the untracked environment: %w", err)
	}
	if fast, err = fast.Extend(libs...); err != nil {
		return Pair{}, fmt.Errorf("building the untracked environment: %w", err)
	}
	if fast, err = extend(fast); err != nil {
		return Pair{}, fmt.Errorf("building the untracked environment: %w", err)
	}
	return Pair{Tracked: tracked, Fast: fast}, nil
}
