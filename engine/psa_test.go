package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
	"github.com/arbiter-pdp/arbiter/engine/psa"
)

// A PodSecurityConfiguration without metadata is the object
// "PodSecurityConfiguration default"; PodSecurity levels are policies an
// exception may name; a traced decision explains the exception and the
// result of a Pod Security level.
func TestPodSecurityObjectsAndTrace(t *testing.T) {
	config := manifest.NewObject("config.yaml", map[string]any{
		"apiVersion": "pod-security.admission.config.k8s.io/v1", "kind": "PodSecurityConfiguration",
		"defaults":   map[string]any{"enforce": "restricted"},
		"exemptions": map[string]any{"usernames": []any{"system:serviceaccount:kube-system:job-controller"}},
	})
	if config.Name != manifest.PodSecurityConfigurationName || config.Ref() != "PodSecurityConfiguration default" ||
		engine.Classify(config) != engine.ClassPodSecurityConfiguration {
		t.Fatalf("config object: %q %q %v", config.Name, config.Ref(), engine.Classify(config))
	}
	other := manifest.NewObject("x.yaml", map[string]any{"apiVersion": "pod-security.admission.config.k8s.io/v1", "kind": "Other", "metadata": map[string]any{"name": "x"}})
	if engine.Classify(other) != engine.ClassUnsupported {
		t.Fatalf("other kind of the group: %v", engine.Classify(other))
	}
	exception := manifest.NewObject("exc.yaml", map[string]any{
		"apiVersion": "policies.kyverno.io/v1", "kind": "PolicyException",
		"metadata": map[string]any{"name": "legacy", "namespace": "ops"},
		"spec": map[string]any{
			"policyRefs":      []any{map[string]any{"kind": "PodSecurity", "name": "restricted"}},
			"matchConditions": []any{map[string]any{"name": "legacy", "expression": "object.metadata.name == 'legacy'"}},
		},
	})
	ps, err := engine.Compile([]*manifest.Object{config, exception}, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ps.PodSecurityConfiguration() != config || len(ps.PodSecurityWarnings()) != 1 {
		t.Fatalf("configuration %v, warnings %q", ps.PodSecurityConfiguration(), ps.PodSecurityWarnings())
	}
	if !ps.HasPolicy(psa.KindPodSecurity, "restricted") || !ps.HasPolicy(psa.KindPodSecurity, "baseline") || ps.HasPolicy(psa.KindPodSecurity, "privileged") {
		t.Fatal("HasPolicy(PodSecurity, level)")
	}
	trace := &outcome.Trace{}
	req := &admission.Request{Object: map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "legacy", "namespace": "apps"},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "app", "image": "app:1"}}}}}
	req.Fill()
	dec := ps.Evaluate(context.Background(), req, &engine.EvalOptions{Trace: trace})
	if !dec.Allowed || len(dec.Results) != 1 || dec.Results[0].Rule != "exception" {
		t.Fatalf("decision: %+v", dec)
	}
	var steps []string
	for _, s := range trace.Steps {
		steps = append(steps, s.Policy+" "+s.Phase+" "+s.Exception+" "+s.Expression+s.Value+s.Note)
	}
	all := strings.Join(steps, "\n")
	for _, want := range []string{
		"restricted exception.matchCondition ops/legacy object.metadata.name == 'legacy'true",
		"restricted exception.matchCondition ops/legacy granted",
		`restricted result ops/legacy Pod Security restricted:latest (enforce): skip: rule is skipped due to policy exception: ops/legacy`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("trace lacks %q:\n%s", want, all)
		}
	}
	// Without a configuration, a Pod in an unlabelled namespace has no
	// Pod Security result at all.
	ps, err = engine.Compile([]*manifest.Object{exception}, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ps.PodSecurityConfiguration() != nil || ps.PodSecurityWarnings() != nil {
		t.Fatal("no configuration expected")
	}
	req = &admission.Request{Object: req.Object}
	req.Fill()
	if dec := ps.Evaluate(context.Background(), req, nil); !dec.Allowed || len(dec.Results) != 0 || len(dec.AuditAnnotations) != 0 {
		t.Fatalf("decision without configuration: %+v", dec)
	}
}
