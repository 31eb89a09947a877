package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// recorder is a slog.Handler keeping its records.
type recorder struct {
	level slog.Level
	mu    sync.Mutex
	recs  []slog.Record
}

func (r *recorder) Enabled(_ context.Context, l slog.Level) bool { return l >= r.level }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func attrsOf(rec slog.Record) [][2]string {
	var out [][2]string
	rec.Attrs(func(a slog.Attr) bool {
		out = append(out, [2]string{a.Key, a.Value.String()})
		return true
	})
	return out
}

// TestLogUnaryAsMiddleware runs calls ending in different codes through
// logUnary and through the go-grpc-middleware logging interceptor it
// replaces, configured as the server configured it, at debug and info
// level: the same lines, levels and fields in the same order (the start
// time within a second, the duration present).
func TestLogUnaryAsMiddleware(t *testing.T) {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4242}})
	deadlineCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	info := &grpc.UnaryServerInfo{FullMethod: "/arbiter.v1.DecisionService/Decide"}
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		for _, c := range []struct {
			name string
			ctx  context.Context
			err  error
		}{
			{"ok", ctx, nil},
			{"ok with a deadline", deadlineCtx, nil},
			{"invalid argument", ctx, status.Error(codes.InvalidArgument, "object: bad")},
			{"resource exhausted", deadlineCtx, status.Error(codes.ResourceExhausted, "too large")},
			{"internal", ctx, status.Error(codes.Internal, "boom")},
			{"plain error", ctx, io.ErrUnexpectedEOF},
			{"EOF", ctx, io.EOF},
		} {
			var got, want recorder
			got.level, want.level = level, level
			for _, r := range []*recorder{&got, &want} {
				log := slog.New(r)
				logger := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
					log.Log(ctx, slog.Level(lvl), msg, fields...)
				})
				icpt := logUnary(log, logger, callLogLevel)
				if r == &want {
					icpt = logging.UnaryServerInterceptor(logger, logging.WithLogOnEvents(logging.FinishCall), logging.WithLevels(callLogLevel))
				}
				resp, err := icpt(c.ctx, "request", info, func(context.Context, any) (any, error) {
					time.Sleep(time.Millisecond)
					return "response", c.err
				})
				if resp != "response" || err != c.err {
					t.Fatalf("%s: %v, %v", c.name, resp, err)
				}
			}
			if len(want.recs) == 0 && (level == slog.LevelDebug || c.name == "internal" || c.name == "resource exhausted") {
				t.Fatalf("%s at %v: the middleware logged nothing", c.name, level)
			}
			if len(got.recs) != len(want.recs) {
				t.Fatalf("%s at %v: %d lines, the middleware %d", c.name, level, len(got.recs), len(want.recs))
			}
			for i := range got.recs {
				g, w := got.recs[i], want.recs[i]
				if g.Message != w.Message || g.Level != w.Level {
					t.Fatalf("%s: %q at %v, the middleware %q at %v", c.name, g.Message, g.Level, w.Message, w.Level)
				}
				ga, wa := attrsOf(g), attrsOf(w)
				keys := func(a [][2]string) []string {
					var k []string
					for _, e := range a {
						k = append(k, e[0])
					}
					return k
				}
				if !slices.Equal(keys(ga), keys(wa)) {
					t.Fatalf("%s: fields %v, the middleware %v", c.name, keys(ga), keys(wa))
				}
				for j := range ga {
					switch ga[j][0] {
					case "grpc.time_ms":
					case "grpc.start_time", "grpc.request.deadline":
						gt, err1 := time.Parse(time.RFC3339, ga[j][1])
						wt, err2 := time.Parse(time.RFC3339, wa[j][1])
						if err1 != nil || err2 != nil || gt.Sub(wt).Abs() > time.Second {
							t.Fatalf("%s: %s %s, the middleware %s", c.name, ga[j][0], ga[j][1], wa[j][1])
						}
					default:
						if ga[j] != wa[j] {
							t.Fatalf("%s: %v, the middleware %v", c.name, ga[j], wa[j])
						}
					}
				}
			}
		}
	}
}
