package psa

import (
	"encoding/json"
	"errors"
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

// extractPodSpec decodes a workload and returns its pod template's
// metadata and spec, as admission.DefaultPodSpecExtractor does (nil, nil
// for a ReplicationController without a template).
func extractPodSpec(gr schema.GroupResource, obj map[string]any) (*metav1.ObjectMeta, *corev1.PodSpec, error) {
	var template *corev1.PodTemplateSpec
	switch gr {
	case corev1.Resource("podtemplates"):
		var o corev1.PodTemplate
		if err := decode(obj, &o); err != nil {
			return nil, nil, err
		}
		template = &o.Template
	case corev1.Resource("replicationcontrollers"):
		var o corev1.ReplicationController
		if err := decode(obj, &o); err != nil {
			return nil, nil, err
		}
		template = o.Spec.Template
	case appsv1.Resource("replicasets"):
		var o appsv1.ReplicaSet
		if err := decode(obj, &o); err != nil {
			return nil, nil, err
		}
		template = &o.Spec.Template
	case appsv1.Resource("deployments"):
		var o appsv1.Deployment
		if err := decode(obj, &o); err != nil {
			return nil, nil, err
		}
		template = &o.Spec.Template
	case appsv1.Resource("daemonsets"):
		var o appsv1.DaemonSet
		if err := decode(obj, &o); err != nil {
			return nil, nil, err
		}
		template = &o.Spec.Template
	case appsv1.Resource("statefulsets"):
		var o appsv1.StatefulSet
		if err := decode(obj, &o); err != nil {
			return nil, nil, err
		}
		template = &o.Spec.Template
	case batchv1.Resource("jobs"):
		var o batchv1.Job
		if err := decode(obj, &o); err != nil {
			return nil, nil, err
		}
		template = &o.Spec.Template
	case batchv1.Resource("cronjobs"):
		var o batchv1.CronJob
		if err := decode(obj, &o); err != nil {
			return nil, nil, err
		}
		template = &o.Spec.JobTemplate.Spec.Template
	default:
		return nil, nil, errors.New("unexpected resource " + gr.String())
	}
	if template == nil {
		return nil, nil, nil
	}
	return &template.ObjectMeta, &template.Spec, nil
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
