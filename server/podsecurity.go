package server

import (
	"slices"
)

// logPodSecurity logs the warnings about the Pod Security configuration
// (exempted controller service accounts) when a snapshot brings them, so
// an operator sees them once per change rather than on every commit;
// `arbiter status` lists them for as long as they hold.
func (s *Server) logPodSecurity(prev, next *Snapshot) {
	warnings := next.Set.PodSecurityWarnings()
	if len(warnings) == 0 {
		return
	}
	if prev != nil && slices.Equal(prev.Set.PodSecurityWarnings(), warnings) {
		return
	}
	cfg := next.Set.PodSecurityConfiguration()
	for _, w := range warnings {
		s.log.Warn(w, "object", cfg.Ref(), "source", cfg.Source, "revision", next.Revision)
	}
}
