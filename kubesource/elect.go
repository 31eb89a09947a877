package kubesource

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/arbiter-pdp/arbiter/store"
)

// HAConfig configures RunHA.
type HAConfig struct {
	// Source configures the Kubernetes source the primary runs.
	Source Config
	// LeaseName and LeaseNamespace name the coordination.k8s.io Lease.
	LeaseName, LeaseNamespace string
	// Address is the gRPC address followers reach this replica at; the
	// Lease's holderIdentity carries it (see Identity).
	Address string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go leader
	// election's (defaults 15 s, 10 s, 2 s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Identity is the holderIdentity of a replica: its advertised address, '#',
// and a nonce new for every candidacy, so that every new term changes the
// holder and client-go counts it in spec.leaseTransitions.
func Identity(address string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return address + "#" + hex.EncodeToString(b[:])
}

// AddressOf is the address in a holderIdentity (the identity itself when it
// has no '#').
func AddressOf(identity string) string {
	if i := strings.LastIndexByte(identity, '#'); i >= 0 {
		return identity[:i]
	}
	return identity
}

// TermBits is how many low bits of a revision count commits within a term;
// the bits above hold the term.
const TermBits = 32

// Floor is the first revision of a new primary's term: the term is one more
// than the Lease's leaseTransitions when it was acquired, and at least one
// more than the term of the replica's own revision, and the floor is
// term<<32 + 1. Every acquisition by a new identity increments
// leaseTransitions, so a new primary's revisions are above anything an
// earlier primary could have committed (fewer than 2^32 commits per term),
// and followers that were ahead of it resume from a snapshot at the floor.
func Floor(leaseTransitions int32, current uint64) uint64 {
	term := uint64(max(leaseTransitions, 0)) + 1
	term = max(term, current>>TermBits+1)
	return term<<TermBits + 1
}

// Replica is a member of a group that elects its primary with a Lease:
// a Primary whose role RunHA switches. *server.Server satisfies it (S is
// *server.Snapshot).
type Replica[S Snapshot] interface {
	Primary[S]
	Roles
}

// Roles are the methods of a Replica that switch and report its role.
type Roles interface {
	// Store is the replica's store: a new term's floor is computed from
	// its revision.
	Store() *store.Store
	// Lead makes the replica the primary. When floor is above the current
	// revision its first commit is an empty one at revision floor. A
	// replica that already is the primary is left as it is.
	Lead(ctx context.Context, floor uint64) (store.Commit, error)
	// Follow makes the replica a follower of the primary at addr (a
	// standby when addr is empty); a follower of addr is left as it is.
	Follow(addr string)
	// Standby is Follow(""): the replica refuses writes and follows no one.
	Standby()
	// PrimaryAddress is the address of the primary followed (empty for a
	// primary or a standby).
	PrimaryAddress() string
}

// RunHA runs a replica of a group that elects its primary with a Lease:
// while it holds the Lease it is the primary and runs the Kubernetes source
// (re-listing everything on the way in); otherwise it follows the replica
// whose address the Lease names (a standby until one does). It returns when
// ctx ends, after the source stopped and the Lease was released.
func RunHA[S Snapshot](ctx context.Context, srv Replica[S], cfg HAConfig) error {
	cfg.Source.defaults()
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = 15 * time.Second
	}
	if cfg.RenewDeadline <= 0 {
		cfg.RenewDeadline = 10 * time.Second
	}
	if cfg.RetryPeriod <= 0 {
		cfg.RetryPeriod = 2 * time.Second
	}
	if cfg.LeaseName == "" || cfg.LeaseNamespace == "" || cfg.Address == "" {
		return errors.New("kubesource: the Lease needs a name, a namespace and the replica's address")
	}
	leases, err := coordinationv1client.NewForConfig(cfg.Source.Rest)
	if err != nil {
		return fmt.Errorf("kubesource: %w", err)
	}
	h := &ha{srv: srv, target: primaryOf[S]{srv}, cfg: cfg, leases: leases, log: cfg.Source.Logger.With("component", "kube-lease", "lease", cfg.LeaseNamespace+"/"+cfg.LeaseName)}
	srv.Standby()
	for ctx.Err() == nil {
		if err := h.term(ctx); err != nil {
			h.log.Error("leader election", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(cfg.RetryPeriod):
			}
		}
	}
	return nil
}

type ha struct {
	srv    Roles
	target target // srv, as the source writes to it
	cfg    HAConfig
	leases coordinationv1client.CoordinationV1Interface
	log    *slog.Logger

	// mu orders role changes: leading (after checking the term's context)
	// against stepping down and following.
	mu       sync.Mutex
	leadDone chan struct{}
}

// term is one candidacy: a fresh identity, followed until it loses the
// Lease (or never gets it) and ctx ends.
func (h *ha) term(ctx context.Context) error {
	id := Identity(h.cfg.Address)
	ectx, cancel := context.WithCancel(ctx)
	defer cancel()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: h.cfg.LeaseName, Namespace: h.cfg.LeaseNamespace},
		Client:     h.leases,
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	poke := make(chan struct{}, 1)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   h.cfg.LeaseDuration,
		RenewDeadline:   h.cfg.RenewDeadline,
		RetryPeriod:     h.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            "arbiter",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) { h.lead(lctx, cancel, id) },
			OnStoppedLeading: func() {},
			OnNewLeader: func(string) {
				select {
				case poke <- struct{}{}:
				default:
				}
			},
		},
	})
	if err != nil {
		return err
	}
	followDone := make(chan struct{})
	go func() {
		defer close(followDone)
		h.followLeader(ectx, le, id, poke)
	}()
	h.log.Info("candidate", "identity", id)
	le.Run(ectx) // returns when the Lease is lost, or ctx ends
	cancel()
	<-followDone
	h.mu.Lock()
	done := h.leadDone
	h.leadDone = nil
	h.mu.Unlock()
	if done != nil {
		<-done // the source stopped: nothing more is written
		h.log.Info("gave up the Lease; standing by", "identity", id)
	}
	// Also when shutting down: a draining replica takes no writes once
	// another one may hold the Lease.
	h.srv.Standby()
	return nil
}

// lead runs while this replica holds the Lease: a new term starts at its
// floor revision, then the Kubernetes source runs until the Lease is lost.
func (h *ha) lead(lctx context.Context, giveUp context.CancelFunc, id string) {
	h.mu.Lock()
	if lctx.Err() != nil { // the term already ended
		h.mu.Unlock()
		return
	}
	lease, err := h.leases.Leases(h.cfg.LeaseNamespace).Get(lctx, h.cfg.LeaseName, metav1.GetOptions{})
	transitions := int32(0)
	if err == nil && lease.Spec.LeaseTransitions != nil {
		transitions = *lease.Spec.LeaseTransitions
	}
	if err != nil {
		h.mu.Unlock()
		h.log.Error("reading the Lease after acquiring it; giving it up", "err", err)
		giveUp()
		return
	}
	cur, _ := h.srv.Store().Revision()
	floor := Floor(transitions, cur)
	commit, err := h.srv.Lead(lctx, floor)
	if err != nil {
		h.mu.Unlock()
		h.log.Error("starting a term; giving the Lease up", "err", err)
		giveUp()
		return
	}
	done := make(chan struct{})
	h.leadDone = done
	h.mu.Unlock()
	defer close(done)
	h.log.Info("primary: acquired the Lease", "identity", id, "lease_transitions", transitions,
		"term", floor>>TermBits, "revision", commit.Revision, "digest", commit.Digest)
	src, err := newSource(h.cfg.Source, h.target)
	if err != nil {
		h.log.Error("starting the Kubernetes source; giving the Lease up", "err", err)
		giveUp()
		return
	}
	if err := src.Run(lctx); err != nil {
		h.log.Error("Kubernetes source", "err", err)
		giveUp()
	}
}

// followLeader makes the replica follow the Lease's holder whenever it is
// not leading.
func (h *ha) followLeader(ctx context.Context, le *leaderelection.LeaderElector, id string, poke <-chan struct{}) {
	t := time.NewTicker(h.cfg.RetryPeriod)
	defer t.Stop()
	for {
		h.mu.Lock()
		if h.leadDone == nil && !le.IsLeader() && ctx.Err() == nil {
			if holder := le.GetLeader(); holder != "" && holder != id {
				if addr := AddressOf(holder); addr != h.cfg.Address && addr != h.srv.PrimaryAddress() {
					h.log.Info("following the Lease holder", "holder", holder, "primary", addr)
					h.srv.Follow(addr)
				}
			}
		}
		h.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-poke:
		case <-t.C:
		}
	}
}
