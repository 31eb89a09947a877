package server

import (
	"context"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// Status implements QueryService.Status.
func (s *Server) Status(ctx context.Context, _ *arbiterv1.StatusRequest) (*arbiterv1.StatusResponse, error) {
	snap := s.snap.Load()
	st := s.store.Status()
	resp := &arbiterv1.StatusResponse{
		Revision:       snap.Revision,
		Digest:         snap.Digest,
		Role:           arbiterv1.Role_ROLE_PRIMARY,
		Objects:        uint32(snap.Objects()),
		ContextObjects: uint32(snap.ContextObjects()),
		Policies:       uint32(policyCount(snap.Set)),
		Exceptions:     uint32(len(snap.Set.Exceptions())),
		OldestRevision: st.Oldest,
	}
	if r := s.currentRole(); r.f == nil && !r.primary {
		resp.Role = arbiterv1.Role_ROLE_FOLLOWER
		resp.Warnings = append(resp.Warnings, "standby: no primary known yet")
	} else if r.f != nil {
		resp.Role = arbiterv1.Role_ROLE_FOLLOWER
		resp.Primary = r.follow
		revs, behind, synced, connected, lastErr := r.f.lag()
		if !synced {
			resp.Warnings = append(resp.Warnings, "not yet synced with the primary")
		}
		if !connected && lastErr != "" {
			resp.Warnings = append(resp.Warnings, "not connected to the primary: "+lastErr)
		}
		if revs > 0 {
			resp.Followers = nil
			resp.Warnings = append(resp.Warnings, "behind the primary by "+itoa(revs)+" revisions for "+behind.Round(1e6).String())
		}
	} else {
		resp.Followers = s.followers.list(snap.Revision, snap.Time)
	}
	resp.Warnings = append(resp.Warnings, snap.Set.PodSecurityWarnings()...)
	resp.Serving = s.isServing()
	return resp, nil
}
