package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/store"
)

// follower keeps a replica in step with its primary: it opens Sync from its
// last applied revision, applies each change set (or a snapshot) in one
// transaction, swaps the compiled snapshot, and acknowledges. It reconnects
// with backoff and resumes.
type follower struct {
	s       *Server
	primary string
	done    chan struct{}

	mu sync.Mutex
	// head is the primary's head revision as last heard.
	head uint64
	// behindSince is when the replica last fell behind head (zero: in step).
	behindSince time.Time
	// synced is set once the replica has caught up with the primary after start.
	synced    bool
	connected bool
	lastErr   string
}

// DialOptions are the gRPC options a follower dials its primary with.
var followerDialOptions = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
	grpc.WithDefaultCallOptions(grpc.ForceCodecV2(arbiterv1.ClientCodec()))}

func newFollower(s *Server, primary string) *follower {
	return &follower{s: s, primary: primary, done: make(chan struct{})}
}

func (f *follower) run(ctx context.Context) {
	defer close(f.done)
	go f.watchLag(ctx)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		err := f.session(ctx)
		f.setConnected(false, err)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > 5*time.Second {
			backoff = 100 * time.Millisecond
		}
		f.s.log.Warn("follow stream ended; reconnecting", "primary", f.primary, "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff + time.Duration(rand.Int64N(int64(backoff/2)+1))):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (f *follower) setConnected(ok bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.connected = ok
	if err != nil {
		f.lastErr = err.Error()
	}
}

// session runs one Sync stream until it fails.
func (f *follower) session(ctx context.Context) error {
	conn, err := grpc.NewClient(f.primary, append(followerDialOptions, f.s.cfg.FollowDialOptions...)...)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := arbiterv1.NewSyncServiceClient(conn).Sync(ctx)
	if err != nil {
		return err
	}
	rev, digest := f.s.store.Revision()
	id := f.s.cfg.ReplicaID
	if err := stream.Send(&arbiterv1.SyncRequest{Kind: &arbiterv1.SyncRequest_Follow{Follow: &arbiterv1.FollowRequest{
		FromRevision: rev, Digest: digest, ReplicaId: id,
	}}}); err != nil {
		return err
	}
	f.setConnected(true, nil)
	f.s.log.Info("following", "primary", f.primary, "from", rev)
	var chunks []*arbiterv1.SnapshotChunk
	for {
		m, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("primary closed the stream")
			}
			return err
		}
		switch k := m.GetKind().(type) {
		case *arbiterv1.SyncResponse_Changes:
			f.noteHead(k.Changes.GetHeadRevision())
			if err := f.s.applyChangeSet(ctx, changeSetFromProto(k.Changes)); err != nil {
				return err
			}
		case *arbiterv1.SyncResponse_Snapshot:
			f.noteHead(k.Snapshot.GetHeadRevision())
			chunks = append(chunks, k.Snapshot)
			if !k.Snapshot.GetLast() {
				continue
			}
			snap, err := snapshotFromChunks(chunks)
			chunks = nil
			if err != nil {
				return err
			}
			if err := f.s.applySnapshot(ctx, snap); err != nil {
				return err
			}
		case *arbiterv1.SyncResponse_Heartbeat:
			f.noteHead(k.Heartbeat.GetRevision())
			continue
		default:
			continue
		}
		rev, digest := f.s.store.Revision()
		f.applied(rev)
		if err := stream.Send(&arbiterv1.SyncRequest{Kind: &arbiterv1.SyncRequest_Ack{Ack: &arbiterv1.FollowAck{Revision: rev, Digest: digest}}}); err != nil {
			return err
		}
	}
}

func snapshotFromChunks(chunks []*arbiterv1.SnapshotChunk) (store.Snapshot, error) {
	snap := store.Snapshot{Revision: chunks[0].GetRevision(), Digest: chunks[0].GetDigest()}
	for _, c := range chunks {
		if c.GetRevision() != snap.Revision {
			return snap, fmt.Errorf("snapshot chunks of different revisions (%d, %d)", snap.Revision, c.GetRevision())
		}
		for _, o := range c.GetObjects() {
			snap.Objects = append(snap.Objects, store.Object{Key: keyFromProto(o.GetKey()), Value: o.GetObjectJson()})
		}
	}
	return snap, nil
}

// noteHead records the primary's head revision.
func (f *follower) noteHead(head uint64) {
	defer f.s.updateHealth()
	f.mu.Lock()
	defer f.mu.Unlock()
	if head > f.head {
		f.head = head
	}
	rev, _ := f.s.store.Revision()
	if f.head > rev && f.behindSince.IsZero() {
		f.behindSince = time.Now()
	}
	if f.head <= rev {
		f.caughtUpLocked()
	}
}

// applied records an applied revision.
func (f *follower) applied(rev uint64) {
	defer f.s.updateHealth()
	f.mu.Lock()
	defer f.mu.Unlock()
	if rev >= f.head {
		f.caughtUpLocked()
	}
}

func (f *follower) caughtUpLocked() {
	f.behindSince = time.Time{}
	if !f.synced {
		f.synced = true
		f.s.log.Info("caught up with the primary", "primary", f.primary, "revision", f.head)
	}
}

// lag returns how far behind the primary the replica is.
func (f *follower) lag() (revisions uint64, behind time.Duration, synced, connected bool, lastErr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rev, _ := f.s.store.Revision()
	if f.head > rev {
		revisions = f.head - rev
	}
	if !f.behindSince.IsZero() {
		behind = time.Since(f.behindSince)
	}
	return revisions, behind, f.synced, f.connected, f.lastErr
}

// watchLag re-evaluates health periodically (lag in seconds grows without events).
func (f *follower) watchLag(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.s.updateHealth()
		}
	}
}

// updateHealth sets health from the follower's state: SERVING once synced
// and while within the configured lag.
func (s *Server) updateHealth() {
	r := s.currentRole()
	if r.primary {
		return
	}
	if r.f == nil {
		s.setServing(false) // a standby
		return
	}
	revs, behind, synced, _, _ := r.f.lag()
	ok := synced
	if s.cfg.MaxLagRevisions > 0 && revs > s.cfg.MaxLagRevisions {
		ok = false
	}
	if s.cfg.MaxLagDuration > 0 && behind > s.cfg.MaxLagDuration {
		ok = false
	}
	s.setServing(ok)
}

// applyChangeSet applies one change set received from the primary, in one
// transaction, compiling its result before commit, and swaps the snapshot.
func (s *Server) applyChangeSet(ctx context.Context, cs store.ChangeSet) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	start := time.Now()
	base := s.snap.Load()
	var next *Snapshot
	err := s.store.ApplyChangeSet(ctx, cs, func(_ context.Context, p *store.Pending) error {
		c, err := s.build(contentOf(base), p.Changes(), nil)
		if err != nil {
			return err
		}
		next = s.snapshot(c, p.Revision(), p.Digest())
		return nil
	})
	var re *store.RevisionError
	if errors.Is(err, store.ErrOutOfOrder) && errors.As(err, &re) && re.Requested <= re.Current {
		return nil // already applied
	}
	if err != nil {
		return fmt.Errorf("applying revision %d: %w", cs.Revision, err)
	}
	if next != nil {
		next.Time = time.Now()
		s.swap(next)
		s.observeCommit(start)
	}
	return nil
}

// applySnapshot replaces the replica's content with a snapshot.
func (s *Server) applySnapshot(ctx context.Context, snap store.Snapshot) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	start := time.Now()
	base := s.snap.Load()
	var next *Snapshot
	err := s.store.ReplaceAll(ctx, snap, func(_ context.Context, p *store.Pending) error {
		c, err := s.build(contentOf(base), p.Changes(), nil)
		if err != nil {
			return err
		}
		next = s.snapshot(c, p.Revision(), p.Digest())
		return nil
	})
	if err != nil {
		return fmt.Errorf("installing the snapshot at revision %d: %w", snap.Revision, err)
	}
	if next == nil {
		// Same content: only the revision moved.
		rev, digest := s.store.Revision()
		next = s.snapshot(contentOf(base), rev, digest)
	}
	next.Time = time.Now()
	s.swap(next)
	s.observeCommit(start)
	s.log.Info("snapshot installed", "revision", snap.Revision, "objects", len(snap.Objects))
	return nil
}
