package vap

import ap "github.com/arbiter-pdp/arbiter/engine/admissionpolicy"

// MastersGroup is the group kube-apiserver's authorizer allows everything.
const MastersGroup = ap.MastersGroup

// Authorizer is the `authorizer` of Arbiter's policies (ap.Authorizer):
// members of system:masters are allowed everything, everyone else gets "no
// opinion".
type Authorizer = ap.Authorizer

// EquivalentResources returns the resources matchPolicy Equivalent treats
// as equivalent to gvr, with their kinds (ap.EquivalentResources).
var EquivalentResources = ap.EquivalentResources
