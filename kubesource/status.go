package kubesource

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types, reasons and messages of a policy's
// status.conditionStatus, as Kyverno 1.19's status controller writes them
// (pkg/controllers/policystatus, api policies.kyverno.io conditions.go).
const (
	ConditionWebhookConfigured      = "WebhookConfigured"
	ConditionRBACPermissionsGranted = "RBACPermissionsGranted"
	// ConditionPolicyCached is Kyverno's constant for "the engine holds
	// the policy", which Kyverno never writes. Arbiter writes it, False
	// with the compile error, only while it refuses the policy's current
	// generation, so a healthy policy has exactly Kyverno's two conditions.
	ConditionPolicyCached = "PolicyCached"

	ReasonSucceeded = "Succeeded"
	ReasonFailed    = "Failed"

	MessageWebhookConfigured    = "Webhook configured."
	MessageWebhookNotConfigured = "Policy is not configured in the webhook."
	MessageReadyForReporting    = "Policy is ready for reporting."
	MessageBackgroundDisabled   = "Background scanning disabled; reporting permissions not required."
	// messageMissingPermissions takes the denied checks, "; "-separated.
	messageMissingPermissions = "Policy is not ready for reporting, missing permissions: %s."
	// messageAutogenHint is appended when the policy has autogen
	// configurations (Kyverno's names its Helm values instead).
	messageAutogenHint = " If this is for an autogen'd workload, grant the reporting identity get, list and watch on it."
)

// webhookState is what the status says of a policy's webhook.
type webhookState int

const (
	// webhookUnknown: no configuration was applied yet; the condition is
	// left as it is.
	webhookUnknown webhookState = iota
	webhookConfigured
	webhookNotConfigured
)

// rbacResult is the outcome of the reporting permission checks.
type rbacResult struct {
	granted bool
	message string
}

// statusInput is everything a policy's status is computed from.
type statusInput struct {
	now        time.Time
	generation int64
	// backgroundOnly leaves WebhookConfigured out (the policy is not
	// evaluated at admission).
	backgroundOnly bool
	webhook        webhookState
	rbac           rbacResult
	// refused is the compile error of the current generation ("" when the
	// primary holds it).
	refused string
	// holds is a revision holding the policy: the current generation when
	// accepted, the version still decided with when refused (0: none).
	holds uint64
	// revision is the revision served (what holds defaults to).
	revision uint64
	// autogen is status.autogen.configs (nil: none).
	autogen map[string]any
}

// policyStatus is the status of the policies.kyverno.io policy kinds
// (Kyverno's ValidatingPolicyStatus and MutatingPolicyStatus: the CRDs
// have exactly these three properties).
type policyStatus struct {
	ConditionStatus conditionStatus `json:"conditionStatus"`
	Autogen         autogenStatus   `json:"autogen"`
	Generated       bool            `json:"generated"`
}

type conditionStatus struct {
	Ready      *bool              `json:"ready,omitempty"`
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	Message    string             `json:"message"`
}

type autogenStatus struct {
	Configs map[string]any `json:"configs,omitempty"`
}

// decodeStatus reads an object's status (nil or malformed: empty).
func decodeStatus(status map[string]any) policyStatus {
	var st policyStatus
	if status == nil {
		return st
	}
	b, err := json.Marshal(status)
	if err != nil {
		return policyStatus{}
	}
	if err := json.Unmarshal(b, &st); err != nil {
		// Keep what decodes on its own: generated, and no conditions.
		g, _ := status["generated"].(bool)
		return policyStatus{Generated: g}
	}
	return st
}

// statusMap is the status as unstructured content.
func (st *policyStatus) statusMap() map[string]any {
	b, _ := json.Marshal(st)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

// sameStatus compares two statuses as the API server stores them (JSON).
func sameStatus(a, b policyStatus) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// buildStatus returns the status Arbiter writes, from the current one: the
// conditions are set as Kyverno's SetReadyByCondition does (reason
// Succeeded or Failed, lastTransitionTime moved only when the status
// flips), kept in Kyverno's order (WebhookConfigured,
// RBACPermissionsGranted, then PolicyCached, then any other), ready is
// true exactly when every condition is True, status.generated is kept,
// and conditionStatus.message names the revision.
func buildStatus(cur policyStatus, in statusInput) policyStatus {
	conds := slices.Clone(cur.ConditionStatus.Conditions)
	set := func(typ string, ok bool, msg string) {
		c := metav1.Condition{Type: typ, Status: metav1.ConditionFalse, Reason: ReasonFailed, Message: msg,
			ObservedGeneration: in.generation, LastTransitionTime: metav1.NewTime(in.now.Truncate(time.Second))}
		if ok {
			c.Status, c.Reason = metav1.ConditionTrue, ReasonSucceeded
		}
		for i := range conds {
			if conds[i].Type == typ {
				if conds[i].Status != c.Status || conds[i].LastTransitionTime.IsZero() {
					conds[i].LastTransitionTime = c.LastTransitionTime
				}
				conds[i].Status, conds[i].Reason, conds[i].Message, conds[i].ObservedGeneration = c.Status, c.Reason, c.Message, c.ObservedGeneration
				return
			}
		}
		conds = append(conds, c)
	}
	remove := func(typ string) {
		conds = slices.DeleteFunc(conds, func(c metav1.Condition) bool { return c.Type == typ })
	}
	switch {
	case in.backgroundOnly:
		remove(ConditionWebhookConfigured)
	case in.webhook == webhookConfigured:
		set(ConditionWebhookConfigured, true, MessageWebhookConfigured)
	case in.webhook == webhookNotConfigured:
		set(ConditionWebhookConfigured, false, MessageWebhookNotConfigured)
	}
	set(ConditionRBACPermissionsGranted, in.rbac.granted, in.rbac.message)
	if in.refused != "" {
		set(ConditionPolicyCached, false, truncate(in.refused, 4096))
	} else {
		remove(ConditionPolicyCached)
	}
	rank := func(t string) int {
		switch t {
		case ConditionWebhookConfigured:
			return 0
		case ConditionRBACPermissionsGranted:
			return 1
		case ConditionPolicyCached:
			return 2
		}
		return 3
	}
	slices.SortStableFunc(conds, func(a, b metav1.Condition) int { return rank(a.Type) - rank(b.Type) })
	ready := true
	for _, c := range conds {
		if c.Status != metav1.ConditionTrue {
			ready = false
		}
	}
	out := policyStatus{Generated: cur.Generated}
	out.ConditionStatus = conditionStatus{Ready: &ready, Conditions: conds, Message: revisionMessage(cur.ConditionStatus.Message, in)}
	if len(in.autogen) > 0 {
		out.Autogen.Configs = in.autogen
	}
	if len(out.ConditionStatus.Conditions) == 0 {
		out.ConditionStatus.Conditions = nil
	}
	return out
}

// The revision in conditionStatus.message (Kyverno writes its
// ValidatingAdmissionPolicy generation messages there; Arbiter generates
// none). A revision is kept while the policy's generation is the same, so
// a new primary (whose revisions are in a later term) writes nothing.
var (
	holdsRe   = regexp.MustCompile(`^Arbiter revision (\d+) holds generation (\d+)\.$`)
	refusedRe = regexp.MustCompile(`revision (\d+) holds the version Arbiter decides with`)
)

func revisionMessage(prev string, in statusInput) string {
	if in.refused != "" {
		if in.holds == 0 {
			return fmt.Sprintf("Arbiter refused generation %d (see the %s condition); no revision holds this policy.", in.generation, ConditionPolicyCached)
		}
		rev := in.holds
		if m := holdsRe.FindStringSubmatch(prev); m != nil {
			rev = keepRevision(m[1], rev, in.revision)
		} else if m := refusedRe.FindStringSubmatch(prev); m != nil {
			rev = keepRevision(m[1], rev, in.revision)
		}
		return fmt.Sprintf("Arbiter refused generation %d (see the %s condition); revision %d holds the version Arbiter decides with.", in.generation, ConditionPolicyCached, rev)
	}
	rev := in.holds
	if m := holdsRe.FindStringSubmatch(prev); m != nil && m[2] == strconv.FormatInt(in.generation, 10) {
		rev = keepRevision(m[1], rev, in.revision)
	}
	if rev == 0 {
		rev = in.revision
	}
	return fmt.Sprintf("Arbiter revision %d holds generation %d.", rev, in.generation)
}

// keepRevision is the revision a message named, when it is not above the
// revision served (a store restored to an older revision does not hold it).
func keepRevision(named string, fallback, served uint64) uint64 {
	r, err := strconv.ParseUint(named, 10, 64)
	if err != nil || r == 0 || r > served {
		return fallback
	}
	return r
}

// rbacOutcome words the reporting permission checks as Kyverno does.
func rbacOutcome(background bool, denied []string, autogen bool) rbacResult {
	if !background {
		return rbacResult{granted: true, message: MessageBackgroundDisabled}
	}
	if len(denied) == 0 {
		return rbacResult{granted: true, message: MessageReadyForReporting}
	}
	msg := fmt.Sprintf(messageMissingPermissions, strings.Join(denied, "; "))
	if autogen {
		msg += messageAutogenHint
	}
	return rbacResult{message: msg}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
