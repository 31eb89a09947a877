package server

import (
	"runtime"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server/limits"
)

// interceptors returns the server's interceptor chains, outermost first:
// recovery, RPC metrics, logging, authentication and authorization
// (Config.Authz), per-identity rate limits, then the deadline and size
// limits (Config.Limits).
func (s *Server) interceptors(recoverU, logU grpc.UnaryServerInterceptor, recoverS, logS grpc.StreamServerInterceptor) ([]grpc.UnaryServerInterceptor, []grpc.StreamServerInterceptor) {
	unary := []grpc.UnaryServerInterceptor{recoverU}
	stream := []grpc.StreamServerInterceptor{recoverS}
	if m := s.cfg.Metrics; m != nil {
		unary = append(unary, m.GRPC.UnaryServerInterceptor())
		stream = append(stream, m.GRPC.StreamServerInterceptor())
	}
	unary = append(unary, logU)
	stream = append(stream, logS)
	if a := s.cfg.Authz; a != nil {
		unary = append(unary, a.UnaryServerInterceptor())
		stream = append(stream, a.StreamServerInterceptor())
	}
	if l := s.cfg.Limits; l.RateLimit > 0 {
		rl := limits.NewRateLimiter(l.RateLimit, l.RateBurst)
		unary = append(unary, ratelimit.UnaryServerInterceptor(rl))
		stream = append(stream, ratelimit.StreamServerInterceptor(rl))
	}
	lim := &s.cfg.Limits
	unary = append(unary, lim.UnaryServerInterceptor(toStatus))
	stream = append(stream, lim.StreamServerInterceptor(toStatus))
	return unary, stream
}

// streamWorkers is the least number of gRPC stream workers: more than the
// concurrent calls of a busy client (ghz's 8, a webhook shim's handful).
const streamWorkers = 32

// serverOptions are the gRPC options that follow from the configuration.
func (s *Server) serverOptions() []grpc.ServerOption {
	// Run handlers on a fixed set of workers rather than a new goroutine
	// per call. gRPC hands a call to an idle worker or, when every worker
	// is busy, starts a goroutine for it, whose small stack then grows
	// (copied) through the engine's CEL evaluation: with only GOMAXPROCS
	// workers, most concurrent calls took that path. Idle workers cost
	// their stacks only.
	opts := []grpc.ServerOption{grpc.NumStreamWorkers(uint32(max(streamWorkers, 4*runtime.GOMAXPROCS(0)))),
		// vtprotobuf encoding of responses (see arbiterv1.ServerCodec).
		grpc.ForceServerCodecV2(arbiterv1.ServerCodec())}
	if n := s.cfg.Limits.MaxRequestBytes; n > 0 {
		opts = append(opts, grpc.MaxRecvMsgSize(n))
	}
	return opts
}

// registerOps registers the operations services (AdminService) and sets up
// what the observability hooks need.
func (s *Server) registerOps() {
	arbiterv1.RegisterAdminServiceServer(s.grpc, &adminService{s: s})
	if _, off := s.cfg.TracerProvider.(noop.TracerProvider); off {
		s.tracer = nil // no spans at all
	} else if s.cfg.TracerProvider != nil {
		s.tracer = s.cfg.TracerProvider.Tracer("github.com/arbiter-pdp/arbiter/server")
	} else {
		s.tracer = otel.Tracer("github.com/arbiter-pdp/arbiter/server")
	}
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.InitializeGRPC(s.grpc)
	}
}
