// Package tracing sets up OpenTelemetry tracing from the standard OTEL_*
// environment variables. It is off unless the environment asks for it:
//
//	OTEL_TRACES_EXPORTER=otlp (or unset with an OTLP endpoint set) turns it on;
//	OTEL_TRACES_EXPORTER=none, or nothing set, leaves it off.
//	OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT  where to send spans
//	OTEL_EXPORTER_OTLP_PROTOCOL / OTEL_EXPORTER_OTLP_TRACES_PROTOCOL  grpc (default) or http/protobuf
//	OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _INSECURE, _CERTIFICATE ...  read by the exporters
//	OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES                       the resource
//	OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG                       sampling (default parentbased_always_on)
//
// Propagation is W3C trace context and baggage.
package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// Enabled says whether the environment asks for traces to be exported.
func Enabled() bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))) {
	case "none":
		return false
	case "":
		return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	}
	return true
}

// Setup builds the tracer provider the environment describes, makes it the
// global one with W3C propagation, and returns it with its shutdown (which
// flushes pending spans). It returns a nil provider when tracing is off.
func Setup(ctx context.Context, service, version string) (trace.TracerProvider, func(context.Context) error, error) {
	if !Enabled() {
		return nil, func(context.Context) error { return nil }, nil
	}
	if e := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))); e != "" && e != "otlp" {
		return nil, nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: only otlp and none are supported", e)
	}
	var client otlptrace.Client
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch proto {
	case "", "grpc":
		client = otlptracegrpc.NewClient()
	case "http/protobuf":
		client = otlptracehttp.NewClient()
	default:
		return nil, nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%s: grpc or http/protobuf", proto)
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(service), semconv.ServiceVersion(version)),
		resource.WithFromEnv(), resource.WithHost(), resource.WithProcessPID())
	if err != nil {
		return nil, nil, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp, tp.Shutdown, nil
}

// notHealth leaves health checks (probes) out of traces.
func notHealth(i *stats.RPCTagInfo) bool {
	return !strings.HasPrefix(i.FullMethodName, "/grpc.health.v1.Health/")
}

// ServerOption instruments a gRPC server with otelgrpc (a span per call,
// health checks excepted).
func ServerOption(tp trace.TracerProvider) grpc.ServerOption {
	return grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithFilter(notHealth)))
}

// DialOption instruments a gRPC client connection with otelgrpc.
func DialOption(tp trace.TracerProvider) grpc.DialOption {
	return grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithFilter(notHealth)))
}
