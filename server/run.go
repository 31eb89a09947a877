package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/arbiter-pdp/arbiter/decisionlog"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/internal/tracing"
	"github.com/arbiter-pdp/arbiter/server/gateway"
	"github.com/arbiter-pdp/arbiter/server/metrics"
)

// RunConfig is what Run serves: the server, its gRPC listener, and what
// runs beside it (tracing, metrics, the JSON gateway, the decision log).
// Run's errors name the `arbiter serve` flag they concern.
type RunConfig struct {
	// Server configures the replica. Run sets its ReplicaID when empty
	// (HOST/LISTEN-ADDRESS), and its Metrics, DecisionLog and
	// TracerProvider from the fields below.
	Server Config
	// Listen is the gRPC listen address.
	Listen string
	// Load are objects written in one revision at start (a primary's).
	Load []*manifest.Object
	// ServiceVersion is the version traces carry (tracing is on when the
	// OTEL_* environment asks for it).
	ServiceVersion string
	// MetricsListen serves Prometheus /metrics, /healthz and /readyz (and
	// /debug/pprof/ with Pprof); empty: off.
	MetricsListen string
	Pprof         bool
	// GatewayListen serves the JSON gateway, over TLS with GatewayTLS
	// (nil: plaintext); empty: off. CORSOrigins are the browser origins
	// it allows.
	GatewayListen string
	CORSOrigins   []string
	GatewayTLS    *tls.Config
	// DecisionLog turns the decision log on (nil: off).
	DecisionLog *decisionlog.Config
	// Start, when set, is called once the server exists, before it loads
	// Load or takes calls: what it starts (a Kubernetes source) it stops
	// through Server.OnShutdown. Its error is returned as it is.
	Start func(srv *Server, listenAddr string) error
	// Signals end the serving, as ctx does: health goes NOT_SERVING, calls
	// are still served for Server.DrainDelay, in-flight calls finish
	// within ShutdownTimeout, then everything stops in order (the
	// server and its store, the HTTP endpoints, the decision log, tracing).
	Signals         []os.Signal
	ShutdownTimeout time.Duration
	// Described in the "serving" log line: whether the listener has TLS,
	// how client certificates are asked for, and the authorization in
	// force.
	TLS                bool
	ClientCertificates string
	Authorization      string
}

// Run serves until ctx is done or a signal of cfg.Signals arrives, then
// shuts everything down in order. It returns nil after an orderly
// shutdown, and an error when something cannot start or the gRPC server
// fails.
func Run(ctx context.Context, cfg RunConfig) error {
	log := cfg.Server.Logger
	if log == nil {
		log = slog.Default()
		cfg.Server.Logger = log
	}
	tp, stopTracing, err := tracing.Setup(ctx, "arbiter", cfg.ServiceVersion)
	if err != nil {
		return fmt.Errorf("tracing: %v", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = stopTracing(sctx)
	}()
	if tp != nil {
		cfg.Server.TracerProvider = tp
		cfg.Server.GRPCOptions = append(cfg.Server.GRPCOptions, tracing.ServerOption(tp))
		cfg.Server.FollowDialOptions = append(cfg.Server.FollowDialOptions, tracing.DialOption(tp))
		log.Info("tracing on (OTEL_* environment)")
	} else {
		// No tracing: decisions make no spans (the global provider's
		// non-recording spans cost a microsecond each).
		cfg.Server.TracerProvider = noop.NewTracerProvider()
	}

	var reg *metrics.Metrics
	if cfg.MetricsListen != "" {
		reg = metrics.New()
		cfg.Server.Metrics = reg
	}
	if dc := cfg.DecisionLog; dc != nil {
		dl, err := decisionlog.New(*dc)
		if err != nil {
			return err
		}
		defer func() {
			if err := dl.Close(); err != nil {
				log.Error("closing the decision log", "err", err)
			}
		}()
		cfg.Server.DecisionLog = dl
		if reg != nil {
			reg.RegisterCounterFunc("arbiter_decision_log_dropped_total", "Decision log lines dropped because the writer fell behind.",
				func() float64 { return float64(dl.Dropped()) })
		}
		log.Info("decision log on", "output", dc.Output, "objects", dc.IncludeObjects,
			"sample_allowed", fraction(dc.SampleAllowed), "sample_denied", fraction(dc.SampleDenied))
	}

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %v", cfg.Listen, err)
	}
	if cfg.Server.ReplicaID == "" {
		host, _ := os.Hostname()
		cfg.Server.ReplicaID = host + "/" + lis.Addr().String()
	}
	srv, err := New(ctx, cfg.Server)
	if err != nil {
		lis.Close()
		return err
	}
	if cfg.Start != nil {
		if err := cfg.Start(srv, lis.Addr().String()); err != nil {
			srv.Shutdown(context.Background())
			lis.Close()
			return err
		}
	}
	if reg != nil {
		reg.RegisterState(srv.State)
	}
	if len(cfg.Load) > 0 {
		commit, err := srv.LoadObjects(ctx, cfg.Load)
		if err != nil {
			srv.Shutdown(context.Background())
			return fmt.Errorf("--load: %v", err)
		}
		log.Info("loaded manifests", "objects", len(cfg.Load), "revision", commit.Revision, "digest", commit.Digest, "unchanged", commit.Unchanged)
	}
	var metricsSrv *http.Server
	if reg != nil {
		mlis, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			srv.Shutdown(context.Background())
			return fmt.Errorf("--metrics-listen %s: %v", cfg.MetricsListen, err)
		}
		metricsSrv = &http.Server{Handler: reg.Handler(cfg.Pprof, srv.Serving), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := metricsSrv.Serve(mlis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server", "err", err)
			}
		}()
		log.Info("metrics", "listen", mlis.Addr().String(), "pprof", cfg.Pprof)
	}
	var gatewaySrv *http.Server
	if cfg.GatewayListen != "" {
		gatewaySrv, err = startGateway(ctx, srv, &cfg)
		if err != nil {
			srv.Shutdown(context.Background())
			stopHTTP(metricsSrv)
			return err
		}
	}
	var sigCtx context.Context
	var stop context.CancelFunc
	if len(cfg.Signals) > 0 {
		sigCtx, stop = signal.NotifyContext(ctx, cfg.Signals...)
	} else { // (signal.NotifyContext without signals would take every one)
		sigCtx, stop = context.WithCancel(ctx)
	}
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	role := "primary"
	if cfg.Server.Follow != "" {
		role = "follower of " + cfg.Server.Follow
	}
	log.Info("serving", "listen", lis.Addr().String(), "role", role, "data", cfg.Server.DataDir, "tls", cfg.TLS,
		"client_certificates", cfg.ClientCertificates, "authorization", cfg.Authorization)
	stopEndpoints := func() {
		stopHTTP(gatewaySrv)
		stopHTTP(metricsSrv)
	}
	select {
	case err := <-errc:
		srv.Shutdown(context.Background())
		stopEndpoints()
		if err != nil {
			return fmt.Errorf("serving: %v", err)
		}
		return nil
	case <-sigCtx.Done():
	}
	log.Info("shutting down", "drain_delay", cfg.Server.DrainDelay, "timeout", cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Server.DrainDelay+cfg.ShutdownTimeout)
	defer cancel()
	srv.Shutdown(sctx)
	stopEndpoints()
	if err := <-errc; err != nil {
		return fmt.Errorf("serving: %w", err)
	}
	return nil
}

// fraction is a sampling fraction of the decision log (nil: 1).
func fraction(f *float64) float64 {
	if f == nil {
		return 1
	}
	return *f
}

// stopHTTP shuts an HTTP server down (nil: nothing).
func stopHTTP(h *http.Server) {
	if h == nil {
		return
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = h.Shutdown(sctx)
}

// startGateway serves the JSON gateway on cfg.GatewayListen: HTTPS with
// the server's certificate when TLS is on, calling the in-process gRPC
// server so every interceptor applies.
func startGateway(ctx context.Context, srv *Server, cfg *RunConfig) (*http.Server, error) {
	log := cfg.Server.Logger
	conn, err := srv.GatewayConn(ctx)
	if err != nil {
		return nil, fmt.Errorf("--gateway-listen: %v", err)
	}
	h, err := gateway.New(ctx, conn, gateway.Options{CORSOrigins: cfg.CORSOrigins})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("--gateway-listen: %v", err)
	}
	glis, err := net.Listen("tcp", cfg.GatewayListen)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("--gateway-listen %s: %v", cfg.GatewayListen, err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 1 << 20}
	hs.RegisterOnShutdown(func() { conn.Close() })
	if base := cfg.GatewayTLS; base != nil {
		// The gRPC configuration offers only h2; HTTP clients may speak
		// HTTP/1.1 too.
		hs.TLSConfig = &tls.Config{
			MinVersion: tls.VersionTLS12,
			GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
				c, err := base.GetConfigForClient(hello)
				if err != nil || c == nil {
					return c, err
				}
				c = c.Clone()
				c.NextProtos = []string{"h2", "http/1.1"}
				return c, nil
			},
		}
	}
	go func() {
		var err error
		if hs.TLSConfig != nil {
			err = hs.ServeTLS(glis, "", "")
		} else {
			err = hs.Serve(glis)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("gateway server", "err", err)
		}
	}()
	log.Info("JSON gateway", "listen", glis.Addr().String(), "tls", cfg.GatewayTLS != nil, "cors_origins", cfg.CORSOrigins)
	return hs, nil
}
