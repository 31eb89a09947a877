package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/store"
)

// Sync implements SyncService.Sync.
func (s *Server) Sync(stream arbiterv1.SyncService_SyncServer) error {
	first, err := stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	switch k := first.GetKind().(type) {
	case *arbiterv1.SyncRequest_Write:
		return s.serveWrites(stream, k.Write)
	case *arbiterv1.SyncRequest_Follow:
		return s.serveFollower(stream, k.Follow)
	}
	return status.Error(codes.InvalidArgument, "the first message of a Sync stream must be a write or a follow request")
}

// serveWrites applies the stream's write batches in order, acknowledging
// each; a refused batch ends the stream with its status.
func (s *Server) serveWrites(stream arbiterv1.SyncService_SyncServer, w *arbiterv1.WriteBatch) error {
	ctx := stream.Context()
	for {
		ack, err := s.WriteBatch(ctx, w)
		if err != nil {
			return toStatus(err)
		}
		if err := stream.Send(&arbiterv1.SyncResponse{Kind: &arbiterv1.SyncResponse_WriteAck{WriteAck: ack}}); err != nil {
			return err
		}
		next, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		nw, ok := next.GetKind().(*arbiterv1.SyncRequest_Write)
		if !ok {
			return status.Error(codes.InvalidArgument, "a write stream carries only writes")
		}
		w = nw.Write
	}
}

// WriteBatch decodes and applies one write batch.
func (s *Server) WriteBatch(ctx context.Context, w *arbiterv1.WriteBatch) (*arbiterv1.WriteAck, error) {
	if r := s.currentRole(); !r.primary {
		return nil, &NotPrimaryError{Primary: r.follow}
	}
	upserts := make([]store.Change, 0, len(w.GetChanges()))
	sources := map[store.Key]string{}
	var deletes []store.Change
	var errs manifest.LoadErrors
	for i, c := range w.GetChanges() {
		src := fmt.Sprintf("changes[%d]", i)
		if c.GetSource() != "" {
			src = c.GetSource()
		}
		switch c.GetOp() {
		case arbiterv1.ChangeOp_CHANGE_OP_UPSERT:
			content, err := manifest.DecodeJSON(c.GetObjectJson())
			if err != nil {
				return nil, &FieldError{Field: src + ".object_json", Detail: err.Error()}
			}
			o := manifest.NewObject(src, content)
			if err := s.writable(o); err != nil {
				var le *manifest.LoadError
				if errors.As(err, &le) {
					errs = append(errs, le)
					continue
				}
				return nil, err
			}
			k := KeyOf(o)
			if pk := c.GetKey(); pk != nil && (pk.GetKind() != "" || pk.GetName() != "") && keyFromProto(pk) != k {
				return nil, &FieldError{Field: src + ".key", Detail: fmt.Sprintf("%s does not match the object (%s)", keyFromProto(pk), k)}
			}
			v, err := encodeObject(o)
			if err != nil {
				return nil, err
			}
			upserts = append(upserts, store.Change{Op: store.OpUpsert, Key: k, Value: v})
			sources[k] = src
		case arbiterv1.ChangeOp_CHANGE_OP_DELETE:
			if w.GetReplaceAll() {
				return nil, &FieldError{Field: src + ".op", Detail: "a replace_all batch holds only upserts"}
			}
			if c.GetKey() == nil {
				return nil, &FieldError{Field: src + ".key", Detail: "required for a delete"}
			}
			deletes = append(deletes, store.Change{Op: store.OpDelete, Key: keyFromProto(c.GetKey())})
		default:
			return nil, &FieldError{Field: src + ".op", Detail: "must be CHANGE_OP_UPSERT or CHANGE_OP_DELETE"}
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	batch := store.Batch{ExpectedRevision: w.GetExpectedRevision(), IdempotencyKey: w.GetIdempotencyKey()}
	var commit store.Commit
	var err error
	if w.GetReplaceAll() {
		commit, err = s.writeWith(ctx, func(base *Snapshot) (store.Batch, error) {
			keep := make(map[store.Key]bool, len(upserts))
			for _, c := range upserts {
				keep[c.Key] = true
			}
			batch.Changes = append(batch.Changes, upserts...)
			base.Range(func(k store.Key, _ *manifest.Object) bool {
				if !keep[k] {
					batch.Changes = append(batch.Changes, store.Change{Op: store.OpDelete, Key: k})
				}
				return true
			})
			return batch, nil
		}, sources)
	} else {
		batch.Changes = append(upserts, deletes...)
		commit, err = s.writeWith(ctx, func(*Snapshot) (store.Batch, error) { return batch, nil }, sources)
	}
	if err != nil {
		return nil, err
	}
	ack := &arbiterv1.WriteAck{Revision: commit.Revision, Digest: commit.Digest, Unchanged: commit.Unchanged}
	for _, c := range commit.Changes {
		if c.Op == store.OpDelete {
			ack.Deleted++
		} else {
			ack.Upserted++
		}
	}
	return ack, nil
}

func keyFromProto(k *arbiterv1.ObjectKey) store.Key {
	return store.Key{Group: k.GetGroup(), Kind: k.GetKind(), Namespace: k.GetNamespace(), Name: k.GetName()}
}

func keyToProto(k store.Key) *arbiterv1.ObjectKey {
	return &arbiterv1.ObjectKey{Group: k.Group, Kind: k.Kind, Namespace: k.Namespace, Name: k.Name}
}

// heartbeatInterval is how often an idle follow stream carries a heartbeat.
var heartbeatInterval = 2 * time.Second

// snapshotChunkBytes bounds the objects of one snapshot message.
const snapshotChunkBytes = 1 << 20

// serveFollower streams the store's changes to a follower, from its
// revision on, in order; a snapshot when the history it needs is gone.
// One goroutine sends; another receives the follower's acks.
func (s *Server) serveFollower(stream arbiterv1.SyncService_SyncServer, req *arbiterv1.FollowRequest) error {
	r := s.currentRole()
	if !r.primary {
		return toStatus(&NotPrimaryError{Primary: r.follow})
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	// Follow streams never end on their own: end them when the server shuts
	// down, so a graceful stop does not wait for them, or when the replica
	// stops being the primary, so its followers look for the new one.
	defer context.AfterFunc(r.ctx, cancel)()
	id := req.GetReplicaId()
	addr := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	if id == "" {
		id = addr
	}
	f := s.followers.connect(id, addr, req.GetFromRevision(), req.GetDigest())
	defer s.followers.disconnect(f)
	s.log.Info("follower connected", "replica", id, "addr", addr, "from", req.GetFromRevision())

	// The receiver ends with the stream: a handler cannot interrupt Recv,
	// so it is not waited for.
	recvDone := make(chan error, 1)
	go func() {
		defer cancel()
		for {
			m, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
					err = nil
				}
				recvDone <- err
				return
			}
			if a, ok := m.GetKind().(*arbiterv1.SyncRequest_Ack); ok {
				s.followers.ack(f, a.Ack.GetRevision(), a.Ack.GetDigest())
			}
		}
	}()
	err := s.sendChanges(ctx, stream, req.GetFromRevision(), req.GetDigest())
	s.log.Info("follower disconnected", "replica", id)
	select {
	case rerr := <-recvDone:
		if rerr != nil {
			return rerr
		}
	default:
	}
	if err != nil && ctx.Err() == nil {
		return toStatus(err)
	}
	return nil
}

func (s *Server) sendChanges(ctx context.Context, stream arbiterv1.SyncService_SyncServer, from uint64, digest string) error {
	needSnapshot := from == 0
	if from > 0 {
		// A follower whose content differs from ours at its revision (a
		// diverged or restored replica) gets a snapshot.
		if ok, err := s.digestMatches(ctx, from, digest); err != nil || !ok {
			needSnapshot = true
		}
	}
	ticker := time.NewTicker(heartbeatInterval)
	defer ticker.Stop()
	for {
		st, changed := s.store.Watch()
		if needSnapshot {
			snap, err := s.store.List(ctx)
			if err != nil {
				return err
			}
			if err := sendSnapshot(stream, snap, st.Revision); err != nil {
				return err
			}
			from, needSnapshot = snap.Revision, false
			continue
		}
		if from < st.Revision {
			css, err := s.store.ChangesSince(ctx, from, 256)
			if errors.Is(err, store.ErrCompacted) || errors.Is(err, store.ErrFutureRevision) {
				needSnapshot = true
				continue
			}
			if err != nil {
				return err
			}
			for _, cs := range css {
				if err := stream.Send(&arbiterv1.SyncResponse{Kind: &arbiterv1.SyncResponse_Changes{Changes: changeSetToProto(cs, st.Revision)}}); err != nil {
					return err
				}
				from = cs.Revision
			}
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-ticker.C:
			if err := stream.Send(&arbiterv1.SyncResponse{Kind: &arbiterv1.SyncResponse_Heartbeat{Heartbeat: &arbiterv1.Heartbeat{Revision: st.Revision, Digest: st.Digest}}}); err != nil {
				return err
			}
		}
	}
}

// digestMatches says whether our content digest at rev equals digest.
func (s *Server) digestMatches(ctx context.Context, rev uint64, digest string) (bool, error) {
	cur, curDigest := s.store.Revision()
	if rev == cur {
		return curDigest == digest, nil
	}
	if rev > cur {
		return false, nil
	}
	css, err := s.store.ChangesSince(ctx, rev-1, 1)
	if err != nil || len(css) == 0 || css[0].Revision != rev {
		return false, err
	}
	return css[0].Digest == digest, nil
}

func sendSnapshot(stream arbiterv1.SyncService_SyncServer, snap store.Snapshot, head uint64) error {
	chunk := &arbiterv1.SnapshotChunk{Revision: snap.Revision, Digest: snap.Digest, HeadRevision: head}
	size := 0
	for _, o := range snap.Objects {
		if size > 0 && size+len(o.Value) > snapshotChunkBytes {
			if err := stream.Send(&arbiterv1.SyncResponse{Kind: &arbiterv1.SyncResponse_Snapshot{Snapshot: chunk}}); err != nil {
				return err
			}
			chunk = &arbiterv1.SnapshotChunk{Revision: snap.Revision, Digest: snap.Digest, HeadRevision: head}
			size = 0
		}
		chunk.Objects = append(chunk.Objects, &arbiterv1.StoredObject{Key: keyToProto(o.Key), ObjectJson: o.Value})
		size += len(o.Value)
	}
	chunk.Last = true
	return stream.Send(&arbiterv1.SyncResponse{Kind: &arbiterv1.SyncResponse_Snapshot{Snapshot: chunk}})
}

func changeSetToProto(cs store.ChangeSet, head uint64) *arbiterv1.ChangeSet {
	out := &arbiterv1.ChangeSet{Revision: cs.Revision, Digest: cs.Digest, HeadRevision: head}
	for _, c := range cs.Changes {
		pc := &arbiterv1.Change{Key: keyToProto(c.Key)}
		if c.Op == store.OpDelete {
			pc.Op = arbiterv1.ChangeOp_CHANGE_OP_DELETE
		} else {
			pc.Op = arbiterv1.ChangeOp_CHANGE_OP_UPSERT
			pc.ObjectJson = c.Value
		}
		out.Changes = append(out.Changes, pc)
	}
	return out
}

func changeSetFromProto(cs *arbiterv1.ChangeSet) store.ChangeSet {
	out := store.ChangeSet{Revision: cs.GetRevision(), Digest: cs.GetDigest()}
	for _, c := range cs.GetChanges() {
		sc := store.Change{Key: keyFromProto(c.GetKey())}
		if c.GetOp() == arbiterv1.ChangeOp_CHANGE_OP_DELETE {
			sc.Op = store.OpDelete
		} else {
			sc.Op = store.OpUpsert
			sc.Value = c.GetObjectJson()
		}
		out.Changes = append(out.Changes, sc)
	}
	return out
}

// followerTable is what a primary knows of its followers.
type followerTable struct {
	mu sync.Mutex
	m  map[string]*followerState
}

type followerState struct {
	id, addr    string
	acked       uint64
	ackedDigest string
	connected   int
	lastAck     time.Time
	behindSince time.Time
}

func newFollowerTable() *followerTable { return &followerTable{m: map[string]*followerState{}} }

func (t *followerTable) connect(id, addr string, rev uint64, digest string) *followerState {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.m[id]
	if !ok {
		f = &followerState{id: id}
		t.m[id] = f
	}
	f.addr = addr
	f.connected++
	if rev > f.acked || !ok {
		f.acked, f.ackedDigest = rev, digest
	}
	return f
}

func (t *followerTable) disconnect(f *followerState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f.connected--
}

func (t *followerTable) ack(f *followerState, rev uint64, digest string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f.acked, f.ackedDigest, f.lastAck = rev, digest, time.Now()
}

// list returns the followers' status relative to the head revision.
func (t *followerTable) list(head uint64, headTime time.Time) []*arbiterv1.FollowerStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*arbiterv1.FollowerStatus, 0, len(t.m))
	now := time.Now()
	for _, f := range t.m {
		fs := &arbiterv1.FollowerStatus{
			ReplicaId: f.id, Address: f.addr, AckedRevision: f.acked, AckedDigest: f.ackedDigest, Connected: f.connected > 0,
		}
		if head > f.acked {
			fs.LagRevisions = head - f.acked
			if f.behindSince.IsZero() {
				f.behindSince = headTime
			}
			if !f.behindSince.IsZero() {
				fs.LagSeconds = now.Sub(f.behindSince).Seconds()
			}
		} else {
			f.behindSince = time.Time{}
		}
		out = append(out, fs)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ReplicaId < out[j].ReplicaId })
	return out
}
