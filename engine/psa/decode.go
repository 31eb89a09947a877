package psa

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	sigsjson "sigs.k8s.io/json"
)

// podSpecResources are the resources of admission.DefaultPodSpecExtractor.
var podSpecResources = map[schema.GroupResource]bool{
	corev1.Resource("replicationcontrollers"): true,
	corev1.Resource("podtemplates"):           true,
	appsv1.Resource("replicasets"):            true,
	appsv1.Resource("deployments"):            true,
	appsv1.Resource("statefulsets"):           true,
	appsv1.Resource("daemonsets"):             true,
	batchv1.Resource("jobs"):                  true,
	batchv1.Resource("cronjobs"):              true,
}

var errNoObject = errors.New("no object")

// decode decodes a JSON-shaped object into a typed one as kube-apiserver's
// JSON serializer does (case-sensitive field names, unknown fields dropped).
func decode(obj map[string]any, into any) error {
	if obj == nil {
		return errNoObject
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	return sigsjson.UnmarshalCaseSensitivePreserveInts(data, into)
}

// decodePod decodes the part of a Pod that Pod Security reads.
func decodePod(obj map[string]any, into *corev1.Pod) error {
	if obj == nil {
		return errNoObject
	}
	return decodeProjected(obj, &into.ObjectMeta, &into.Spec)
}

// templatePaths are where the workload resources hold their pod template.
var templatePaths = map[schema.GroupResource][]string{
	corev1.Resource("podtemplates"):           {"template"},
	corev1.Resource("replicationcontrollers"): {"spec", "template"},
	appsv1.Resource("replicasets"):            {"spec", "template"},
	appsv1.Resource("deployments"):            {"spec", "template"},
	appsv1.Resource("daemonsets"):             {"spec", "template"},
	appsv1.Resource("statefulsets"):           {"spec", "template"},
	batchv1.Resource("jobs"):                  {"spec", "template"},
	batchv1.Resource("cronjobs"):              {"spec", "jobTemplate", "spec", "template"},
}

// extractPodSpec returns a workload's pod template's metadata and spec, as
// admission.DefaultPodSpecExtractor does (nil, nil for a
// ReplicationController without a template; an empty template for the
// other kinds, whose template is not optional).
func extractPodSpec(gr schema.GroupResource, obj map[string]any) (*metav1.ObjectMeta, *corev1.PodSpec, error) {
	path, ok := templatePaths[gr]
	if !ok {
		return nil, nil, errors.New("unexpected resource " + gr.String())
	}
	if obj == nil {
		return nil, nil, errNoObject
	}
	var cur any = obj
	for i, k := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, nil, fmt.Errorf("%s: expected an object, got %s", strings.Join(path[:i], "."), jsonType(cur))
		}
		if cur, ok = m[k]; !ok || cur == nil {
			cur = nil
			break
		}
	}
	if cur == nil && gr == corev1.Resource("replicationcontrollers") {
		return nil, nil, nil
	}
	var template corev1.PodTemplateSpec
	if cur != nil {
		tm, ok := cur.(map[string]any)
		if !ok {
			return nil, nil, fmt.Errorf("%s: expected an object, got %s", strings.Join(path, "."), jsonType(cur))
		}
		if err := decodeProjected(tm, &template.ObjectMeta, &template.Spec); err != nil {
			return nil, nil, err
		}
	}
	return &template.ObjectMeta, &template.Spec, nil
}

func jsonType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case nil:
		return "null"
	}
	return "a number"
}

// SignificantPodUpdate says whether a Pod update is checked: upstream's
// isSignificantPodUpdate (a container added or removed, an image changed,
// an ephemeral container added or its image changed) and, as the Pod
// Security Admission documentation says, a change to the seccomp or
// AppArmor annotations. Updates that change only other metadata,
// spec.activeDeadlineSeconds or spec.tolerations are never checked.
func SignificantPodUpdate(pod, oldPod *corev1.Pod) bool {
	if isSignificantPodUpdate(pod, oldPod) {
		return true
	}
	return securityAnnotationsChanged(pod.Annotations, oldPod.Annotations)
}

// isSignificantPodUpdate is admission's (unexported there), unchanged.
func isSignificantPodUpdate(pod, oldPod *corev1.Pod) bool {
	if len(pod.Spec.Containers) != len(oldPod.Spec.Containers) {
		return true
	}
	if len(pod.Spec.InitContainers) != len(oldPod.Spec.InitContainers) {
		return true
	}
	for i := 0; i < len(pod.Spec.Containers); i++ {
		if isSignificantContainerUpdate(&pod.Spec.Containers[i], &oldPod.Spec.Containers[i]) {
			return true
		}
	}
	for i := 0; i < len(pod.Spec.InitContainers); i++ {
		if isSignificantContainerUpdate(&pod.Spec.InitContainers[i], &oldPod.Spec.InitContainers[i]) {
			return true
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		var oldC *corev1.Container
		for i, oc := range oldPod.Spec.EphemeralContainers {
			if oc.Name == c.Name {
				oldC = (*corev1.Container)(&oldPod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
				break
			}
		}
		if oldC == nil {
			return true // EphemeralContainer added
		}
		if isSignificantContainerUpdate((*corev1.Container)(&c.EphemeralContainerCommon), oldC) {
			return true
		}
	}
	return false
}

func isSignificantContainerUpdate(container, oldContainer *corev1.Container) bool {
	return container.Image != oldContainer.Image
}

// Seccomp and AppArmor annotations whose changes are checked.
const (
	seccompPodAnnotation             = "seccomp.security.alpha.kubernetes.io/pod"
	seccompContainerAnnotationPrefix = "container.seccomp.security.alpha.kubernetes.io/"
	appArmorAnnotationPrefix         = "container.apparmor.security.beta.kubernetes.io/"
)

func isSecurityAnnotation(k string) bool {
	return k == seccompPodAnnotation || strings.HasPrefix(k, seccompContainerAnnotationPrefix) || strings.HasPrefix(k, appArmorAnnotationPrefix)
}

func securityAnnotationsChanged(a, b map[string]string) bool {
	for k, v := range a {
		if isSecurityAnnotation(k) {
			if old, ok := b[k]; !ok || old != v {
				return true
			}
		}
	}
	for k := range b {
		if isSecurityAnnotation(k) {
			if _, ok := a[k]; !ok {
				return true
			}
		}
	}
	return false
}
