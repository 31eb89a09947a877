package server

import (
	"github.com/prometheus/client_golang/prometheus"
)

// StoreRevision is the store revision the snapshot compiles (the
// Kubernetes source names it in the policies' status).
func (s *Snapshot) StoreRevision() uint64 { return s.Revision }

// MetricsRegistry is the Prometheus registry the server's metrics are in
// (nil without --metrics-listen): the Kubernetes source adds its own.
func (s *Server) MetricsRegistry() *prometheus.Registry {
	if s.cfg.Metrics == nil {
		return nil
	}
	return s.cfg.Metrics.Registry
}
