package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/arbiter-pdp/arbiter/engine"
)

// StoreRevision is the store revision the snapshot compiles (the
// Kubernetes source names it in the policies' status).
func (s *Snapshot) StoreRevision() uint64 { return s.Revision }

// PolicySet returns the compiled policies of the revision (the Kubernetes
// source runs its DeletingPolicies).
func (s *Snapshot) PolicySet() *engine.PolicySet { return s.Set }

// MetricsRegistry is the Prometheus registry the server's metrics are in
// (nil without --metrics-listen): the Kubernetes source adds its own.
func (s *Server) MetricsRegistry() *prometheus.Registry {
	if s.cfg.Metrics == nil {
		return nil
	}
	return s.cfg.Metrics.Registry
}
