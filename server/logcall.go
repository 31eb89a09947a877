package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// logUnary is the "finished call" log line of
// logging.UnaryServerInterceptor(logger, WithLogOnEvents(FinishCall),
// WithLevels(level)), the same fields in the same order, built only for
// calls that are logged: the middleware builds them (the start time
// formatted, the peer's address, the service and method) for every call,
// and most calls, OK at debug level, are not logged. It does not inject
// the fields into the handler's context (nothing reads them there).
// TestLogUnaryAsMiddleware checks it against the middleware.
func logUnary(log *slog.Logger, logger logging.Logger, level logging.CodeToLevel) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		codeErr := err
		if errors.Is(codeErr, io.EOF) {
			codeErr = nil
		}
		code := status.Code(codeErr)
		lvl := level(code)
		if !log.Enabled(ctx, slog.Level(lvl)) {
			return resp, err
		}
		logFinishedCall(ctx, logger, lvl, info.FullMethod, req, start, code, codeErr)
		return resp, err
	}
}

func logFinishedCall(ctx context.Context, logger logging.Logger, lvl logging.Level, fullMethod string, req any, start time.Time, code codes.Code, err error) {
	c := interceptors.NewServerCallMeta(fullMethod, nil, req)
	fields := logging.Fields{
		logging.SystemTag[0], logging.SystemTag[1],
		logging.ComponentFieldKey, logging.KindServerFieldValue,
		logging.ServiceFieldKey, c.Service,
		logging.MethodFieldKey, c.Method,
		logging.MethodTypeFieldKey, string(c.Typ),
	}.WithUnique(logging.ExtractFields(ctx))
	if p, ok := peer.FromContext(ctx); ok {
		fields = append(fields, "peer.address", p.Addr.String())
	}
	single := logging.Fields{"grpc.start_time", start.Format(time.RFC3339)}
	if d, ok := ctx.Deadline(); ok {
		single = single.AppendUnique(logging.Fields{"grpc.request.deadline", d.Format(time.RFC3339)})
	}
	fields = fields.WithUnique(single)
	fields = fields.AppendUnique(logging.Fields{"grpc.code", code.String()})
	if err != nil {
		fields = fields.AppendUnique(logging.Fields{"grpc.error", fmt.Sprintf("%v", err)})
	}
	logger.Log(ctx, lvl, "finished call", fields.AppendUnique(logging.DurationToTimeMillisFields(time.Since(start)))...)
}
