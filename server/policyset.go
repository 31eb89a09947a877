package server

import "github.com/arbiter-pdp/arbiter/engine"

// PolicySet is the compiled policy set of the revision: what the Kubernetes
// source's background scans evaluate existing objects with.
func (s *Snapshot) PolicySet() *engine.PolicySet { return s.Set }
