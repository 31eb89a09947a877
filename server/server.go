// Package server is where the store and the engine meet: it serves the gRPC
// API (Decision, Sync, Query, health, reflection) from one immutable compiled
// snapshot per store revision, swapped in atomically after each commit, and
// runs the follower that keeps a replica in step with its primary.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/arbiter-pdp/arbiter/clusterdata"
	"github.com/arbiter-pdp/arbiter/decisionlog"
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/imageverify"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server/authz"
	"github.com/arbiter-pdp/arbiter/server/limits"
	"github.com/arbiter-pdp/arbiter/server/metrics"
	"github.com/arbiter-pdp/arbiter/store"
)

// Config configures a server.
type Config struct {
	// DataDir holds the bbolt file (arbiter.db). Default ./data.
	DataDir string
	// KeepRevisions is how many revisions of history the store keeps for
	// followers (older ones get a snapshot).
	KeepRevisions int
	// Follow is the address of the primary; empty for a primary.
	Follow string
	// ReplicaID names this replica to its primary (default: the listen address or host name).
	ReplicaID string
	// MaxLagRevisions and MaxLagDuration make a follower NOT_SERVING when it
	// is this far behind its primary (0: no limit).
	MaxLagRevisions uint64
	MaxLagDuration  time.Duration
	// MinRevisionWait bounds how long Decide waits for min_revision when the
	// call has no deadline. Default 2s.
	MinRevisionWait time.Duration
	// Logger receives the server's logs. Default slog.Default().
	Logger *slog.Logger
	// GRPCOptions are extra gRPC server options (limits, stats handlers).
	GRPCOptions []grpc.ServerOption
	// Credentials secure the network listener (nil: plaintext). The
	// in-process connection of the JSON gateway (GatewayConn) does not use
	// them.
	Credentials credentials.TransportCredentials
	// NoSync disables fsync of the store (tests only).
	NoSync bool
	// FollowDialOptions are extra gRPC dial options a follower uses to reach
	// its primary (credentials).
	FollowDialOptions []grpc.DialOption

	// Authz identifies callers and checks their roles (nil: no checks).
	Authz *authz.Authorizer
	// Limits are the request limits (zero values: none).
	Limits limits.Config
	// Metrics receives the server's metrics (nil: none).
	Metrics *metrics.Metrics
	// DecisionLog receives decisions (nil: none).
	DecisionLog *decisionlog.Logger
	// TracerProvider makes the per-decision spans (nil: the global one; a
	// noop.TracerProvider: none, at no cost).
	TracerProvider oteltrace.TracerProvider
	// DrainDelay is how long Shutdown keeps serving after health goes
	// NOT_SERVING, so load balancers stop sending calls first.
	DrainDelay time.Duration

	// StoreSecrets lets writes to the primary store v1 Secrets as context
	// objects (refused by default). Followers store what their primary
	// committed.
	StoreSecrets bool
	// ImageData, HTTP and Poster answer image.GetMetadata, http.* and
	// resource.Post in decisions (nil: such a call is an error result
	// saying it is not configured). The stored context objects and
	// GlobalContextEntries answer resource.Get/List and globalContext.Get.
	ImageData kyvernocel.ImageDataContext
	HTTP      kyvernocel.HTTPContext
	Poster    clusterdata.Poster
	// ImageVerifier serves ImageValidatingPolicies in decisions: image
	// reads, signature and attestation verification, digest pinning (nil:
	// their verification functions and digest pinning are error results
	// naming what is unavailable). An *imageverify.Verifier also gives the
	// arbiter_image_* metrics when Metrics is set.
	ImageVerifier kyvernocel.ImageVerifier
	// MutateExisting compiles MutatingPolicies that mutate existing
	// resources (evaluation.mutateExisting, targetMatchConstraints): a
	// replica with the Kubernetes source, whose Mutator updates their
	// targets (SetMutateExisting), and a follower, which stores what its
	// primary committed. Without it such a policy is refused: a replica
	// fed by push or --load has no cluster to mutate.
	MutateExisting bool
}

// Server is an Arbiter replica.
type Server struct {
	arbiterv1.UnimplementedDecisionServiceServer
	arbiterv1.UnimplementedQueryServiceServer
	arbiterv1.UnimplementedSyncServiceServer

	cfg      Config
	log      *slog.Logger
	store    *store.Store
	compiler *engine.Compiler

	snap   atomic.Pointer[Snapshot]
	swapMu sync.Mutex
	// writeMu serialises writes (bbolt has one writer; this keeps the
	// compile-in-hook and swap of one write before the next).
	writeMu sync.Mutex

	grpc   *grpc.Server
	health *health.Server
	// grpcOpts are the server options without transport credentials, for
	// the in-process server behind the JSON gateway.
	grpcOpts []grpc.ServerOption
	inprocMu sync.Mutex
	inproc   *grpc.Server

	followers *followerTable
	// roles is the replica's role (primary, follower, standby); see role.go.
	roles roleState

	// mutateExisting receives the requests that set off mutate-existing
	// MutatingPolicies (mutateexisting.go).
	mutateExisting atomic.Pointer[sinkBox]

	hooksMu       sync.Mutex
	shutdownHooks []func(context.Context)

	tracer oteltrace.Tracer

	closeOnce sync.Once
	// runCtx ends when the server shuts down (follower loops, follow streams).
	runCtx context.Context
	stop   context.CancelFunc
	done   chan struct{}
}

// ServiceName is the health service name of the decision service.
const ServiceName = "arbiter.v1.DecisionService"

// New opens the store in cfg.DataDir, compiles its content and prepares the
// gRPC server. It does not listen; call Serve.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.DataDir == "" {
		cfg.DataDir = "data"
	}
	if cfg.MinRevisionWait == 0 {
		cfg.MinRevisionWait = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	compiler, err := engine.NewCompiler()
	if err != nil {
		return nil, fmt.Errorf("building the CEL environment: %w", err)
	}
	st, err := store.Open(filepath.Join(cfg.DataDir, "arbiter.db"), store.Options{KeepRevisions: cfg.KeepRevisions, NoSync: cfg.NoSync})
	if err != nil {
		return nil, fmt.Errorf("opening the store: %w", err)
	}
	s := &Server{
		cfg:       cfg,
		log:       cfg.Logger,
		store:     st,
		compiler:  compiler,
		followers: newFollowerTable(),
		done:      make(chan struct{}),
	}
	if err := s.loadSnapshot(ctx); err != nil {
		_ = st.Close() // the error returned is the one that stopped New
		return nil, err
	}
	s.health = health.NewServer()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)

	logger := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		s.log.Log(ctx, slog.Level(lvl), msg, fields...)
	})
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithLevels(callLogLevel),
	}
	recoveryOpt := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		s.log.ErrorContext(ctx, "panic in handler", "panic", p)
		return status.Errorf(codes.Internal, "internal error")
	})
	unary, streams := s.interceptors(recovery.UnaryServerInterceptor(recoveryOpt), logUnary(s.log, logger, callLogLevel),
		recovery.StreamServerInterceptor(recoveryOpt), logging.StreamServerInterceptor(logger, logOpts...))
	opts := append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(streams...)}, s.serverOptions()...)
	opts = append(opts, cfg.GRPCOptions...)
	s.grpcOpts = opts
	if cfg.Credentials != nil {
		opts = append(slices.Clip(opts), grpc.Creds(cfg.Credentials))
	}
	s.grpc = grpc.NewServer(opts...)
	arbiterv1.RegisterDecisionServiceServer(s.grpc, s)
	arbiterv1.RegisterQueryServiceServer(s.grpc, s)
	arbiterv1.RegisterSyncServiceServer(s.grpc, s)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	s.registerOps()
	if iv, ok := cfg.ImageVerifier.(*imageverify.Verifier); ok && cfg.Metrics != nil {
		cfg.Metrics.RegisterImageVerification(func() metrics.ImageVerification {
			st := iv.Stats()
			return metrics.ImageVerification{CacheHits: st.CacheHits, CacheMisses: st.CacheMisses,
				Verifications: st.Verifications, Failures: st.Failures, Errors: st.Errors,
				RegistryRequests: st.RegistryRequests, RegistryErrors: st.RegistryErrors,
				RegistryLatency: st.RegistryLatency, MaxInFlight: st.MaxInFlight}
		})
	}

	runCtx, cancel := context.WithCancel(context.Background())
	s.runCtx, s.stop = runCtx, cancel
	s.startRole()
	return s, nil
}

// loadSnapshot compiles the store's current content.
func (s *Server) loadSnapshot(ctx context.Context) error {
	start := time.Now()
	snap, err := s.store.List(ctx)
	if err != nil {
		return fmt.Errorf("reading the store: %w", err)
	}
	changes := make([]store.Change, len(snap.Objects))
	for i, o := range snap.Objects {
		changes[i] = store.Change{Op: store.OpUpsert, Key: o.Key, Value: o.Value}
	}
	c, err := s.build(nil, changes, nil)
	if err != nil {
		// The store only ever holds content that compiled; failing here
		// means the engine changed under it. Say so loudly.
		return fmt.Errorf("the stored content at revision %d no longer compiles: %w", snap.Revision, err)
	}
	next := s.snapshot(c, snap.Revision, snap.Digest)
	next.Time = snap.Time
	s.swap(next)
	s.log.Info("store loaded", "path", s.store.Path(), "revision", snap.Revision, "digest", snap.Digest,
		"objects", next.Objects(), "context_objects", contextLen(c.view), "policies", len(c.set.Policies()), "exceptions", len(c.set.Exceptions()),
		"took", time.Since(start).Round(time.Millisecond))
	return nil
}

// onSwap runs after every snapshot swap (under swapMu).
func (s *Server) onSwap(next *Snapshot) {}

func (s *Server) setServing(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	if s.health != nil {
		s.health.SetServingStatus("", st)
		s.health.SetServingStatus(ServiceName, st)
	}
}

// Store returns the server's store.
func (s *Server) Store() *store.Store { return s.store }

// GRPCServer returns the gRPC server, to register more services.
func (s *Server) GRPCServer() *grpc.Server { return s.grpc }

// GatewayConn returns a client connection to an in-process gRPC server
// that carries the Decision and Query services with every interceptor of
// the network server (authorization, limits, metrics, logging) but no
// transport credentials: it exists only in memory, for the JSON gateway.
// Callers are identified by the bearer token they send (the gateway
// forwards the HTTP Authorization header); otherwise they are anonymous.
// The server is stopped by Shutdown; the caller closes the connection.
func (s *Server) GatewayConn(ctx context.Context) (*grpc.ClientConn, error) {
	s.inprocMu.Lock()
	defer s.inprocMu.Unlock()
	if s.inproc != nil {
		return nil, errors.New("the gateway connection was already made")
	}
	select {
	case <-s.runCtx.Done():
		return nil, errors.New("the server is shut down")
	default:
	}
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer(s.grpcOpts...)
	arbiterv1.RegisterDecisionServiceServer(g, s)
	arbiterv1.RegisterQueryServiceServer(g, s)
	s.inproc = g
	go func() {
		if err := g.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.log.Error("in-process gateway server", "err", err)
		}
	}()
	conn, err := grpc.NewClient("passthrough:///arbiter-inprocess",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.ForceCodecV2(arbiterv1.ClientCodec())))
	if err != nil {
		g.Stop()
		return nil, err
	}
	return conn, nil
}

// Serve serves gRPC on lis until Shutdown.
func (s *Server) Serve(lis net.Listener) error {
	err := s.grpc.Serve(lis)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Shutdown drains the server: health goes NOT_SERVING, in-flight calls
// finish (bounded by ctx), then the store is closed.
func (s *Server) Shutdown(ctx context.Context) {
	s.closeOnce.Do(func() {
		s.runShutdownHooks(ctx)
		s.health.Shutdown()
		if d := s.cfg.DrainDelay; d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		s.stop()
		stopped := make(chan struct{})
		s.inprocMu.Lock()
		inproc := s.inproc
		s.inprocMu.Unlock()
		go func() {
			if inproc != nil {
				inproc.GracefulStop()
			}
			s.grpc.GracefulStop()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-ctx.Done():
			if inproc != nil {
				inproc.Stop()
			}
			s.grpc.Stop()
			<-stopped
		}
		if f := s.currentRole().f; f != nil {
			<-f.done
		}
		if err := s.store.Close(); err != nil {
			s.log.Error("closing the store", "err", err)
		}
		close(s.done)
	})
}

// Write applies a batch through the validated write path: the content that
// would result is compiled first, and a batch that does not compile is
// refused whole; otherwise it is committed and its snapshot swapped in.
func (s *Server) Write(ctx context.Context, b store.Batch) (store.Commit, error) {
	return s.writeWith(ctx, func(*Snapshot) (store.Batch, error) { return b, nil }, nil)
}

// writeWith is Write with the batch made from the current snapshot, under
// the write lock (replace-all writes compute their deletes this way).
func (s *Server) writeWith(ctx context.Context, mk func(base *Snapshot) (store.Batch, error), sources map[store.Key]string) (store.Commit, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if r := s.currentRole(); !r.primary {
		return store.Commit{}, &NotPrimaryError{Primary: r.follow}
	}
	return s.writeLocked(ctx, mk, sources)
}

// writeLocked is writeWith with writeMu held and the role checked.
func (s *Server) writeLocked(ctx context.Context, mk func(base *Snapshot) (store.Batch, error), sources map[store.Key]string) (store.Commit, error) {
	start := time.Now()
	base := s.snap.Load()
	b, err := mk(base)
	if err != nil {
		return store.Commit{}, err
	}
	var next *Snapshot
	commit, err := s.store.Apply(ctx, b, func(_ context.Context, p *store.Pending) error {
		c, err := s.build(contentOf(base), p.Changes(), sources)
		if err != nil {
			return err
		}
		n := c.objects.len() + contextLen(c.view)
		if max := s.cfg.Limits.MaxObjects; max > 0 && n > max && n > base.Objects() {
			return limits.StoreFull(n, max)
		}
		next = s.snapshot(c, p.Revision(), p.Digest())
		return nil
	})
	if err != nil {
		return commit, err
	}
	if next != nil && !commit.Unchanged && !commit.Replayed {
		next.Time = commit.Time
		s.swap(next)
		s.observeCommit(start)
	}
	return commit, nil
}

// NotPrimaryError is a write sent to a follower.
type NotPrimaryError struct{ Primary string }

func (e *NotPrimaryError) Error() string {
	if e.Primary == "" {
		return "this replica is not the primary and does not know the primary yet (standby): retry, or send writes to the primary"
	}
	return fmt.Sprintf("this replica is a follower: send writes to the primary at %s", e.Primary)
}

// LoadObjects upserts objects in one write (serve --load).
func (s *Server) LoadObjects(ctx context.Context, objs []*manifest.Object) (store.Commit, error) {
	b, err := s.upsertBatch(objs)
	if err != nil {
		return store.Commit{}, err
	}
	sources := make(map[store.Key]string, len(objs))
	for _, o := range objs {
		sources[KeyOf(o)] = o.Source
	}
	return s.writeWith(ctx, func(*Snapshot) (store.Batch, error) { return b, nil }, sources)
}

func (s *Server) upsertBatch(objs []*manifest.Object) (store.Batch, error) {
	var b store.Batch
	var errs manifest.LoadErrors
	seen := map[store.Key]string{}
	for _, o := range objs {
		if err := s.writable(o); err != nil {
			var le *manifest.LoadError
			if errors.As(err, &le) {
				errs = append(errs, le)
				continue
			}
			return b, err
		}
		k := KeyOf(o)
		if prev, dup := seen[k]; dup {
			errs = append(errs, &manifest.LoadError{Source: o.Source, Object: o.Ref(), Field: "metadata.name", Detail: "defined twice (also in " + prev + ")"})
			continue
		}
		seen[k] = o.Source
		v, err := encodeObject(o)
		if err != nil {
			return b, err
		}
		b.Changes = append(b.Changes, store.Change{Op: store.OpUpsert, Key: k, Value: v})
	}
	if len(errs) > 0 {
		return b, errs
	}
	return b, nil
}

func (s *Server) isServing() bool {
	resp, err := s.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: ServiceName})
	return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
}

// callLogLevel is the level of a call's "finished call" log line.
func callLogLevel(c codes.Code) logging.Level {
	switch c {
	case codes.OK, codes.Canceled, codes.NotFound, codes.InvalidArgument, codes.FailedPrecondition, codes.Aborted:
		return logging.LevelDebug
	case codes.Internal, codes.Unknown, codes.DataLoss:
		return logging.LevelError
	}
	return logging.LevelWarn
}
