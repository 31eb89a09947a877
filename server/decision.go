package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/arbiter-pdp/arbiter/clusterdata"
	"github.com/arbiter-pdp/arbiter/convert"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server/limits"
)

// Decide implements DecisionService.Decide: one decision against one
// snapshot, at min_revision or later.
func (s *Server) Decide(ctx context.Context, in *arbiterv1.DecideRequest) (*arbiterv1.DecideResponse, error) {
	snap, err := s.snapshotFor(ctx, in.GetMinRevision())
	if err != nil {
		return nil, toStatus(err)
	}
	start := time.Now()
	req, opts, err := convert.RequestFromProto(in)
	if err != nil {
		return nil, toStatus(err)
	}
	opts.CostBudget = s.cfg.Limits.MaxDecisionCost
	var reads *clusterdata.Reads
	opts.Context, reads = snap.RecordedContext()
	opts.ImageVerifier = s.cfg.ImageVerifier
	ctx, calls := s.collectCalls(ctx)
	d := snap.Set.Evaluate(ctx, req, opts)
	s.triggerMutateExisting(ctx, snap, in, req, opts, d)
	resp := convert.ResponseFromDecision(d)
	resp.Revision = snap.Revision
	resp.Digest = snap.Digest
	resp.DecisionId = newDecisionID()
	s.observeDecision(ctx, snap, req, d, resp, start, reads, calls)
	return resp, nil
}

// snapshotFor returns the current snapshot if it is at least minRevision,
// waiting for it (bounded by the call's deadline, or MinRevisionWait).
func (s *Server) snapshotFor(ctx context.Context, minRevision uint64) (*Snapshot, error) {
	snap := s.snap.Load()
	if snap.Revision >= minRevision {
		return snap, nil
	}
	if _, ok := ctx.Deadline(); !ok || limits.Imposed(ctx) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.MinRevisionWait)
		defer cancel()
	}
	snap, err := s.WaitRevision(ctx, minRevision)
	if err != nil {
		return nil, &RevisionNotReachedError{Want: minRevision, Have: snap.Revision, Digest: snap.Digest, Primary: s.PrimaryAddress()}
	}
	return snap, nil
}

// RevisionNotReachedError is a min_revision the replica did not reach in time.
type RevisionNotReachedError struct {
	Want, Have uint64
	Digest     string
	Primary    string
}

func (e *RevisionNotReachedError) Error() string {
	return "replica is at revision " + itoa(e.Have) + ", below the requested min_revision " + itoa(e.Want) + "; retry, or ask another replica"
}

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	if v == 0 {
		return "0"
	}
	for v > 0 {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return string(b[i:])
}

// newDecisionID returns a unique, time-ordered decision id.
func newDecisionID() string { return newDecisionIDAt(time.Now()) }

// newDecisionIDAt is newDecisionID for a decision made at t.
func newDecisionIDAt(t time.Time) string {
	var b [16]byte
	ms := uint64(t.UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	_, _ = rand.Read(b[6:])
	return hex.EncodeToString(b[:])
}
