package server

import "github.com/arbiter-pdp/arbiter/engine"

// StoreRevision is the store revision the snapshot compiles (the
// Kubernetes source names it in the policies' status).
func (s *Snapshot) StoreRevision() uint64 { return s.Revision }

// PolicySet returns the compiled policies of the revision (the Kubernetes
// source runs its DeletingPolicies).
func (s *Snapshot) PolicySet() *engine.PolicySet { return s.Set }
