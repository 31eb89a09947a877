package ivpol

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/exception"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
	"github.com/arbiter-pdp/arbiter/engine/patch"
)

// RuleMutateDigest is the rule of a digest mutation's results.
const RuleMutateDigest = "mutateDigest"

// Mutate pins image tags to digests, as Kyverno's ivpol mutating webhook
// does (HandleMutating): at admission only (the CLI and background scans
// never mutate), for each policy with validationConfigurations.mutateDigest
// (default true) that matches the request, its matchConditions and
// exceptions allowing: every image of the object's well-known container
// fields (the built-in extractors by kind, not the policy's own images)
// that has no digest and whose normalised reference
// (docker.io/<path>:<tag>) matches matchImageReferences is resolved, and
// replaced by <normalised>@<digest>. A patch path is set once, by the
// first policy. An image that cannot be resolved makes the policy's result
// an error (rule mutateDigest), denied under Deny; the other images keep
// their digest. It sets the mutated object as the request's object.
func (s *Set) Mutate(rq *celeval.Request, out *outcome.Outcome) {
	if !s.Mutating() {
		return
	}
	req := rq.Attributes()
	if req.Mode != admission.ModeAdmission || rq.Object() == nil {
		return
	}
	var ops []patch.Op
	seen := map[string]bool{}
	var infos []outcomeInfo
	var rs *reqState
	for _, e := range s.candidates(req.Resource.Resource) {
		p := e.policy
		if !p.MutatesDigests() || !applies(p, req) {
			continue
		}
		v, err := p.match(rq)
		if err != nil {
			r, info := result(rq, p, outcome.RuleMatch, outcome.Error, "failed to execute matching: "+err.Error(), nil)
			r.Cause = outcome.CauseMatch
			out.Results = append(out.Results, r)
			infos = append(infos, info)
			continue
		}
		if v == nil {
			continue
		}
		if rs == nil {
			rs = newReqState(rq)
		}
		policyOps, err := celeval.Run(rq, &v.scope, func(st *celeval.State) mutateRet {
			ops, err := mutateVariant(rq, rs, e, v, st)
			return mutateRet{ops, err}
		}).unpack()
		for _, op := range policyOps {
			if !seen[op.Path] {
				seen[op.Path] = true
				ops = append(ops, op)
			}
		}
		if err != nil {
			r, info := result(rq, p, RuleMutateDigest, outcome.Error, "failed to update digest: "+err.Error(), nil)
			r.Cause = outcome.CauseEvaluation
			out.Results = append(out.Results, r)
			infos = append(infos, info)
		}
	}
	applyActions(out, infos)
	if len(ops) == 0 {
		return
	}
	mutated, err := patch.ApplyJSONPatch(rq.Object(), ops)
	if err != nil {
		// The paths were read from the object: unreachable.
		return
	}
	rq.SetObject(mutated)
}

type mutateRet struct {
	ops []patch.Op
	err error
}

func (m mutateRet) unpack() ([]patch.Op, error) { return m.ops, m.err }

func mutateVariant(rq *celeval.Request, rs *reqState, e *entry, v *variant, st *celeval.State) ([]patch.Op, error) {
	p := v.policy
	newEvalCtx(rs, v, st)
	st.Label(outcome.PhaseMatchCondition, "", "")
	matched, err := st.Match(v.matchConditions, p.failurePolicy)
	if err != nil || !matched {
		return nil, err
	}
	ver := e.bound.Evaluate(st, p.Namespaced(), p.failurePolicy, exception.ErrorStops)
	if ver.Err != nil {
		return nil, ver.Err
	}
	if ver.Full {
		return nil, nil
	}
	var ops []patch.Op
	var errs []string
	for _, img := range containerImages(rq.Object()) {
		if strings.IndexByte(img.image, '@') >= 0 {
			// pinned to a digest already (a malformed one fails validation)
			continue
		}
		info, err := imageInfo(img.image)
		if err != nil {
			return nil, err
		}
		if info.digest != "" {
			continue
		}
		image := info.String()
		ok, err := p.matchImage(image)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		data, err := rs.image(image, p.opts)
		if err != nil {
			errs = append(errs, fmt.Sprintf("failed to resolve digest for image %s: %v", image, err))
			continue
		}
		ops = append(ops, patch.Op{Op: "replace", Path: img.pointer, Value: image + "@" + data.Digest})
	}
	if len(errs) > 0 {
		return ops, errors.New(strings.Join(errs, "; "))
	}
	return ops, nil
}

type containerImage struct {
	pointer string
	image   string
}

// podSpecPaths are the pod specs of the kinds Kyverno extracts images from
// (pkg/utils/api/image.go), as JSON pointers.
var podSpecPaths = map[string]string{
	"Pod":                   "/spec",
	"DaemonSet":             "/spec/template/spec",
	"Deployment":            "/spec/template/spec",
	"ReplicaSet":            "/spec/template/spec",
	"ReplicationController": "/spec/template/spec",
	"StatefulSet":           "/spec/template/spec",
	"Job":                   "/spec/template/spec",
	"CronJob":               "/spec/jobTemplate/spec/template/spec",
}

// containerImages lists the images of an object's containers by kind, in
// the order initContainers, containers, ephemeralContainers.
func containerImages(obj map[string]any) []containerImage {
	kind, _ := obj["kind"].(string)
	path, ok := podSpecPaths[kind]
	if !ok {
		return nil
	}
	spec := any(obj)
	for _, seg := range strings.Split(path[1:], "/") {
		m, ok := spec.(map[string]any)
		if !ok {
			return nil
		}
		spec = m[seg]
	}
	sm, ok := spec.(map[string]any)
	if !ok {
		return nil
	}
	var out []containerImage
	for _, field := range builtinNames {
		list, _ := sm[field].([]any)
		for i, c := range list {
			cm, _ := c.(map[string]any)
			image, ok := cm["image"].(string)
			if !ok {
				continue
			}
			out = append(out, containerImage{pointer: path + "/" + field + "/" + strconv.Itoa(i) + "/image", image: image})
		}
	}
	return out
}

// normalizedImage is Kyverno's ImageInfo of an image reference (default
// registry docker.io added, tag latest by default).
type normalizedImage struct {
	registry, path, tag, digest string
}

// String is Kyverno's ImageInfo.String: registry/path:tag, or
// registry/path@digest.
func (i normalizedImage) String() string {
	if i.digest != "" {
		return i.registry + "/" + i.path + "@" + i.digest
	}
	return i.registry + "/" + i.path + ":" + i.tag
}

// imageInfo parses an image reference as Kyverno's GetImageInfo does (with
// its default configuration: docker.io, default registry mutation on).
func imageInfo(image string) (normalizedImage, error) {
	full := image
	if i := strings.IndexByte(image, '/'); i == -1 || (!strings.ContainsAny(image[:i], ".:") && image[:i] != "localhost" && strings.ToLower(image[:i]) == image[:i]) {
		full = "docker.io/" + image
	}
	if _, err := kyvernocel.ParseImageReference(full); err != nil {
		return normalizedImage{}, fmt.Errorf("bad image: %s, defaultRegistry: docker.io, enableDefaultRegistryMutation: true: %w", full, err)
	}
	var info normalizedImage
	rest := full
	if at := strings.IndexByte(rest, '@'); at >= 0 {
		info.digest, rest = rest[at+1:], rest[:at]
	}
	slash := strings.IndexByte(rest, '/')
	info.registry, rest = rest[:slash], rest[slash+1:]
	if c := strings.LastIndexByte(rest, ':'); c >= 0 {
		info.tag, rest = rest[c+1:], rest[:c]
	}
	info.path = rest
	if info.digest == "" && info.tag == "" {
		info.tag = "latest"
	}
	return info, nil
}
