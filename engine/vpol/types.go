package vpol

import "github.com/arbiter-pdp/arbiter/engine/kyvernoapi"

// The API types of ValidatingPolicy and NamespacedValidatingPolicy are
// shared with the authorization kind (engine/authz): one schema, told
// apart by spec.evaluation.mode.
type (
	ValidatingPolicy       = kyvernoapi.ValidatingPolicy
	ValidatingPolicyStatus = kyvernoapi.ValidatingPolicyStatus
	ValidatingPolicySpec   = kyvernoapi.ValidatingPolicySpec
)
