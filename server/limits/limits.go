// Package limits holds the server's limits on what a caller may send and how
// often: request and object sizes, batch sizes, the number of objects in the
// store, the per-decision CEL cost budget, per-identity rate limits and the
// deadline of every unary call. Each limit has a flag of `arbiter serve`,
// and a call that exceeds one fails with RESOURCE_EXHAUSTED, a message
// naming the limit and its flag, and a google.rpc.QuotaFailure detail whose
// subject is the flag.
package limits

import (
	"context"
	"fmt"
	"sync"
	"time"

	vtstructpb "github.com/planetscale/vtprotobuf/types/known/structpb"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server/authz"
)

// Defaults.
const (
	DefaultMaxRequestBytes = 16 << 20
	DefaultMaxObjectBytes  = 3 << 20 / 2 // 1.5 MiB, etcd's default request limit
	DefaultMaxBatchObjects = 10000
	DefaultMaxObjects      = 100000
	DefaultMaxDecisionCost = 100_000_000 // ten policies' worth of the API server's per-policy budget
	DefaultRPCTimeout      = 10 * time.Second
)

// Config is the set of limits. Zero values disable a limit, except where
// New documents a default.
type Config struct {
	// MaxRequestBytes bounds one received gRPC message (grpc.MaxRecvMsgSize).
	MaxRequestBytes int
	// MaxObjectBytes bounds each object of a decision request (object,
	// old_object) and of a write batch.
	MaxObjectBytes int
	// MaxBatchObjects bounds the changes of one write batch.
	MaxBatchObjects int
	// MaxObjects bounds the objects in the store (checked in the write path).
	MaxObjects int
	// MaxDecisionCost bounds the CEL cost of every policy evaluated for one
	// decision together (the engine's per-expression and per-policy limits
	// are the API server's and always apply).
	MaxDecisionCost uint64
	// RateLimit is the number of calls per second each caller identity may
	// make (0: unlimited), with bursts of RateBurst (default: RateLimit,
	// at least 1).
	RateLimit float64
	RateBurst int
	// RPCTimeout is the deadline of a unary call that sets none, and the
	// longest one a call may set.
	RPCTimeout time.Duration
}

// Error is a request over a limit.
type Error struct {
	// Flag names the limit (its flag of arbiter serve, without dashes).
	Flag string
	// What the limit is, in words ("object size").
	What string
	// Detail says what was over it.
	Detail string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s limit exceeded: %s (--%s)", e.What, e.Detail, e.Flag)
}

// ObjectTooLarge returns the error of an object over MaxObjectBytes.
func ObjectTooLarge(field string, size, limit int) *Error {
	return &Error{Flag: "max-object-bytes", What: "object size",
		Detail: fmt.Sprintf("%s is %d bytes, over the limit of %d bytes", field, size, limit)}
}

// BatchTooLarge returns the error of a batch over MaxBatchObjects.
func BatchTooLarge(field string, n, limit int) *Error {
	return &Error{Flag: "max-batch-objects", What: "batch size",
		Detail: fmt.Sprintf("%s holds %d objects, over the limit of %d", field, n, limit)}
}

// StoreFull returns the error of a write that would make the store hold
// more than MaxObjects.
func StoreFull(n, limit int) *Error {
	return &Error{Flag: "max-objects", What: "store size",
		Detail: fmt.Sprintf("the write would leave %d objects in the store, over the limit of %d", n, limit)}
}

// ObjectSizes checks the objects of a decision request: the size of a
// Struct is that of its encoding (proto.Size), also when the server's codec
// left it encoded (ObjectWire).
func (c *Config) ObjectSizes(in *arbiterv1.DecideRequest) error {
	if c.MaxObjectBytes <= 0 {
		return nil
	}
	for _, f := range []struct {
		name string
		raw  []byte
		st   *structpb.Struct
		wire []byte
	}{
		{"object_json", in.GetObjectJson(), nil, nil},
		{"object", nil, in.GetObject(), in.ObjectWire()},
		{"old_object_json", in.GetOldObjectJson(), nil, nil},
		{"old_object", nil, in.GetOldObject(), in.OldObjectWire()},
	} {
		n := len(f.raw)
		switch {
		case f.wire != nil:
			if MaxWireStructSize(len(f.wire)) <= c.MaxObjectBytes {
				continue // below the limit however it re-encodes
			}
			n = WireStructSize(f.wire)
		case f.st != nil:
			n = StructSize(f.st)
		}
		if n > c.MaxObjectBytes {
			return ObjectTooLarge(f.name, n, c.MaxObjectBytes)
		}
	}
	return nil
}

// MaxWireStructSize bounds the proto.Size of a Struct decoded from n bytes:
// 3n. Re-encoding a Struct writes what its encoding holds, no longer
// (numbers and lengths in the fewest bytes, a field repeated on the wire
// once), except a map entry's key and value, written even when empty or
// absent: an entry of 2 bytes (tag, length 0) re-encodes to 6, and any
// other grows less. FuzzStructSize checks the bound.
func MaxWireStructSize(n int) int { return 3 * n }

// WireStructSize is the proto.Size of the Struct encoded in b (len(b) if b
// is not one).
func WireStructSize(b []byte) int {
	s := &structpb.Struct{}
	if err := proto.Unmarshal(b, s); err != nil {
		return len(b)
	}
	return StructSize(s)
}

// StructSize is proto.Size(s): vtprotobuf's SizeVT, without reflection, for
// a Struct with no unknown field and no nil Value (all the server decodes
// with vtprotobuf, which refuses unknown fields), proto.Size for others
// (SizeVT counts neither). FuzzStructSize checks it.
func StructSize(s *structpb.Struct) int {
	if !plainStruct(s) {
		return proto.Size(s)
	}
	return (*vtstructpb.Struct)(s).SizeVT()
}

func plainStruct(s *structpb.Struct) bool {
	if s == nil || len(s.ProtoReflect().GetUnknown()) > 0 {
		return false
	}
	for _, v := range s.Fields {
		if !plainValue(v) {
			return false
		}
	}
	return true
}

func plainValue(v *structpb.Value) bool {
	if v == nil || len(v.ProtoReflect().GetUnknown()) > 0 {
		return false
	}
	switch k := v.Kind.(type) {
	case *structpb.Value_StructValue:
		return plainStruct(k.StructValue)
	case *structpb.Value_ListValue:
		l := k.ListValue
		if l == nil || len(l.ProtoReflect().GetUnknown()) > 0 {
			return false
		}
		for _, e := range l.Values {
			if !plainValue(e) {
				return false
			}
		}
	}
	return true
}

// WriteBatch checks a write batch's size and the size of its objects.
func (c *Config) WriteBatch(w *arbiterv1.WriteBatch) error {
	if c.MaxBatchObjects > 0 && len(w.GetChanges()) > c.MaxBatchObjects {
		return BatchTooLarge("the write batch", len(w.GetChanges()), c.MaxBatchObjects)
	}
	if c.MaxObjectBytes > 0 {
		for i, ch := range w.GetChanges() {
			if n := len(ch.GetObjectJson()); n > c.MaxObjectBytes {
				return ObjectTooLarge(fmt.Sprintf("changes[%d].object_json", i), n, c.MaxObjectBytes)
			}
		}
	}
	return nil
}

// UnaryServerInterceptor applies the deadline and the object size limits
// to unary calls. toStatus turns a limit error into the call's status.
func (c *Config) UnaryServerInterceptor(toStatus func(error) error) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if d := c.RPCTimeout; d > 0 {
			if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > d {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, d)
				defer cancel()
				if !ok {
					ctx = context.WithValue(ctx, imposedKey{}, true)
				}
			}
		}
		if in, ok := req.(*arbiterv1.DecideRequest); ok {
			if err := c.ObjectSizes(in); err != nil {
				return nil, toStatus(err)
			}
		}
		return handler(ctx, req)
	}
}

type imposedKey struct{}

// Imposed says whether ctx's deadline is the server's default, the caller
// having set none.
func Imposed(ctx context.Context) bool {
	v, _ := ctx.Value(imposedKey{}).(bool)
	return v
}

// StreamServerInterceptor checks every write batch received on a Sync
// stream against the batch and object size limits.
func (c *Config) StreamServerInterceptor(toStatus func(error) error) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if c.MaxBatchObjects <= 0 && c.MaxObjectBytes <= 0 {
			return handler(srv, ss)
		}
		return handler(srv, &checkedStream{ServerStream: ss, c: c, toStatus: toStatus})
	}
}

type checkedStream struct {
	grpc.ServerStream
	c        *Config
	toStatus func(error) error
}

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if sr, ok := m.(*arbiterv1.SyncRequest); ok && sr.GetWrite() != nil {
		if err := s.c.WriteBatch(sr.GetWrite()); err != nil {
			return s.toStatus(err)
		}
	}
	return nil
}

// RateLimiter limits the calls of each caller identity (go-grpc-middleware's
// ratelimit.Limiter). Health checks are not limited.
type RateLimiter struct {
	limit rate.Limit
	burst int

	mu sync.Mutex
	m  map[string]*rate.Limiter
}

// maxTracked bounds the identities tracked at once; beyond it, identities
// whose bucket is full (idle) are forgotten.
const maxTracked = 10000

// NewRateLimiter returns a limiter of perSecond calls per identity, with
// bursts of burst (default: perSecond, at least 1).
func NewRateLimiter(perSecond float64, burst int) *RateLimiter {
	if burst <= 0 {
		burst = max(1, int(perSecond))
	}
	return &RateLimiter{limit: rate.Limit(perSecond), burst: burst, m: map[string]*rate.Limiter{}}
}

// Limit implements ratelimit.Limiter.
func (r *RateLimiter) Limit(ctx context.Context) error {
	if m, ok := grpc.Method(ctx); ok && len(m) > len(healthPrefix) && m[:len(healthPrefix)] == healthPrefix {
		return nil
	}
	name := authz.CallerName(ctx)
	if name == "" {
		name = authz.Anonymous
	}
	if r.limiter(name).Allow() {
		return nil
	}
	return &Error{Flag: "rate-limit", What: "rate",
		Detail: fmt.Sprintf("%s made more than %g calls/s (burst %d); retry later", name, float64(r.limit), r.burst)}
}

var healthPrefix = "/" + healthpb.Health_ServiceDesc.ServiceName + "/"

func (r *RateLimiter) limiter(name string) *rate.Limiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	l, ok := r.m[name]
	if !ok {
		if len(r.m) >= maxTracked {
			for k, v := range r.m {
				if v.Tokens() >= float64(r.burst) {
					delete(r.m, k)
				}
			}
		}
		l = rate.NewLimiter(r.limit, r.burst)
		r.m[name] = l
	}
	return l
}
