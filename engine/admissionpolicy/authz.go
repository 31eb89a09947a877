package admissionpolicy

import (
	"context"

	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// MastersGroup is the group kube-apiserver's authorizer allows everything.
const MastersGroup = "system:masters"

// Authorizer is the `authorizer` of Arbiter's policies. Arbiter has no
// cluster to ask (no RBAC objects, no webhook authorizer), so it answers
// from what the request carries: the user's name, UID, groups and extra.
// It knows one rule of every cluster for sure: members of system:masters
// are allowed everything (kube-apiserver's privileged-group authorizer runs
// first). For everyone else it has no opinion: allowed() is false,
// reason() is "" and errored() is false — what RBAC answers for a user with
// no binding. The answer is the same on every replica and every call.
type Authorizer struct{}

// Authorize implements authorizer.Authorizer.
func (Authorizer) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if u := a.GetUser(); u != nil {
		for _, g := range u.GetGroups() {
			if g == MastersGroup {
				return authorizer.DecisionAllow, "", nil
			}
		}
	}
	return authorizer.DecisionNoOpinion, "", nil
}
