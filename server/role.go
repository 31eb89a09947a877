package server

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/store"
)

// role is what a replica is at one moment: the primary, a follower of the
// primary at an address, or a standby (a follower that does not know its
// primary yet). A replica started with Config.Follow is a follower, without
// it a primary; Follow, Standby and Lead change the role at run time (the
// Kubernetes source's leader election does). A role is immutable; its
// context ends when the replica leaves it.
type role struct {
	primary bool
	// follow is the primary's address (a follower); empty: standby.
	follow string
	// f is the running follower (nil for a primary or a standby).
	f      *follower
	ctx    context.Context
	cancel context.CancelFunc
}

// roleState holds the current role; mu serialises role changes.
type roleState struct {
	mu  sync.Mutex
	cur atomic.Pointer[role]
}

func (s *Server) currentRole() *role { return s.roles.cur.Load() }

// setRoleLocked makes next current (roles.mu and writeMu held, so no write
// is in flight while the role changes).
func (s *Server) setRoleLocked(next *role) { s.roles.cur.Store(next) }

func (s *Server) newRole(primary bool, follow string) *role {
	ctx, cancel := context.WithCancel(s.runCtx)
	r := &role{primary: primary, follow: follow, ctx: ctx, cancel: cancel}
	if !primary && follow != "" {
		r.f = newFollower(s, follow)
	}
	return r
}

// startRole installs the initial role (from Config.Follow) in New.
func (s *Server) startRole() {
	r := s.newRole(s.cfg.Follow == "", s.cfg.Follow)
	s.roles.cur.Store(r)
	if r.f != nil {
		go r.f.run(r.ctx)
	} else {
		s.setServing(true)
	}
}

// leave ends the current role: its context (follow streams this replica
// serves as a primary, its follower session) and waits for its follower.
// Called with roles.mu held and writeMu not held (the follower's applies
// take writeMu).
func (s *Server) leave(r *role) {
	r.cancel()
	if r.f != nil {
		<-r.f.done
	}
}

// IsPrimary says whether the replica takes writes now.
func (s *Server) IsPrimary() bool { return s.currentRole().primary }

// PrimaryAddress returns the address of the primary a follower follows
// (empty for a primary or a standby).
func (s *Server) PrimaryAddress() string { return s.currentRole().follow }

// Follow makes the replica a follower of the primary at addr, or a standby
// when addr is empty: it refuses writes (naming addr), ends the follow
// streams it served as a primary, and is NOT_SERVING until it has caught up
// with addr. A follower of the same address is left as it is.
func (s *Server) Follow(addr string) {
	s.roles.mu.Lock()
	defer s.roles.mu.Unlock()
	cur := s.currentRole()
	if !cur.primary && cur.follow == addr {
		return
	}
	next := s.newRole(false, addr)
	s.writeMu.Lock()
	s.setRoleLocked(next)
	s.writeMu.Unlock()
	s.leave(cur)
	if next.f != nil {
		go next.f.run(next.ctx)
		s.log.Info("role: follower", "primary", addr)
	} else {
		s.log.Info("role: standby (no primary known)")
	}
	s.updateHealth()
}

// AddFollowDialOptions adds to Config.FollowDialOptions, for a replica
// whose primary is known only at run time. Call it before Follow.
func (s *Server) AddFollowDialOptions(opts ...grpc.DialOption) {
	s.roles.mu.Lock()
	defer s.roles.mu.Unlock()
	s.cfg.FollowDialOptions = append(s.cfg.FollowDialOptions[:len(s.cfg.FollowDialOptions):len(s.cfg.FollowDialOptions)], opts...)
}

// Standby is Follow("").
func (s *Server) Standby() { s.Follow("") }

// Lead makes the replica the primary. When floor is above the current
// revision, the first commit of the new role is an empty one at revision
// floor (store.Batch.MinRevision): a new term's revisions are above any
// an earlier primary could have produced, and every follower, whatever it
// had, resumes from a snapshot at floor or later. Follow streams are served
// only once that commit is made. A replica that already is the primary is
// left as it is.
func (s *Server) Lead(ctx context.Context, floor uint64) (store.Commit, error) {
	s.roles.mu.Lock()
	defer s.roles.mu.Unlock()
	cur := s.currentRole()
	if cur.primary {
		rev, digest := s.store.Revision()
		return store.Commit{Revision: rev, Digest: digest, Unchanged: true}, nil
	}
	s.leave(cur)
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	commit := store.Commit{Unchanged: true}
	commit.Revision, commit.Digest = s.store.Revision()
	if floor > commit.Revision {
		var err error
		commit, err = s.writeLocked(ctx, func(*Snapshot) (store.Batch, error) { return store.Batch{MinRevision: floor}, nil }, nil)
		if err != nil {
			s.setRoleLocked(s.newRole(false, ""))
			s.setServing(false)
			return commit, fmt.Errorf("starting a term at revision %d: %w", floor, err)
		}
	}
	s.setRoleLocked(s.newRole(true, ""))
	s.setServing(true)
	s.log.Info("role: primary", "revision", commit.Revision, "digest", commit.Digest, "floor", floor)
	return commit, nil
}

// WriteObjects commits, in one revision, upserts and deletes from an
// in-process source of objects (the Kubernetes source) through the
// validated write path: the content they produce is compiled first and a
// write that does not compile is refused whole with the load errors naming
// each object (by its Source) and field. It fails with *NotPrimaryError on
// a replica that is not the primary.
func (s *Server) WriteObjects(ctx context.Context, upserts []*manifest.Object, deletes []store.Key) (store.Commit, error) {
	b, err := s.upsertBatch(upserts)
	if err != nil {
		return store.Commit{}, err
	}
	sources := make(map[store.Key]string, len(upserts))
	for _, o := range upserts {
		sources[KeyOf(o)] = o.Source
	}
	for _, k := range deletes {
		if _, dup := sources[k]; dup {
			return store.Commit{}, &FieldError{Field: k.String(), Detail: "both upserted and deleted in one write"}
		}
		b.Changes = append(b.Changes, store.Change{Op: store.OpDelete, Key: k})
	}
	return s.writeWith(ctx, func(*Snapshot) (store.Batch, error) { return b, nil }, sources)
}

// Range calls fn for every object of the snapshot (policy objects and
// context objects), in key order, until fn returns false. The objects are
// shared: they must not be modified.
func (s *Snapshot) Range(fn func(store.Key, *manifest.Object) bool) {
	next, stop := iter.Pull2(s.view.All())
	defer stop()
	ck, co, ok := next()
	emitContext := func(before *store.Key) bool {
		for ok && (before == nil || keyLess(storeKey(ck), *before)) {
			if !isNamespaceKey(ck) && !fn(storeKey(ck), co) { // Namespaces are policy objects
				return false
			}
			ck, co, ok = next()
		}
		return true
	}
	if s.objects != nil {
		for i, k := range s.objects.keys {
			if !emitContext(&k) || !fn(k, s.objects.objs[i]) {
				return
			}
		}
	}
	emitContext(nil)
}

// OnShutdown registers fn to run at the start of Shutdown, before health
// goes NOT_SERVING and calls drain (the Kubernetes source stops there and
// releases its Lease, so another replica takes over while this one drains).
func (s *Server) OnShutdown(fn func(ctx context.Context)) {
	s.hooksMu.Lock()
	defer s.hooksMu.Unlock()
	s.shutdownHooks = append(s.shutdownHooks, fn)
}

func (s *Server) runShutdownHooks(ctx context.Context) {
	s.hooksMu.Lock()
	hooks := s.shutdownHooks
	s.shutdownHooks = nil
	s.hooksMu.Unlock()
	for i := len(hooks) - 1; i >= 0; i-- {
		hooks[i](ctx)
	}
}
