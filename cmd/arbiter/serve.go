package main

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
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/arbiter-pdp/arbiter/apply"
	"github.com/arbiter-pdp/arbiter/decisionlog"
	"github.com/arbiter-pdp/arbiter/internal/gctune"
	"github.com/arbiter-pdp/arbiter/internal/tracing"
	"github.com/arbiter-pdp/arbiter/server"
	"github.com/arbiter-pdp/arbiter/server/gateway"
	"github.com/arbiter-pdp/arbiter/server/limits"
	"github.com/arbiter-pdp/arbiter/server/metrics"
)

type serveOptions struct {
	config          string
	listen          string
	data            string
	follow          string
	load            []string
	keepRevisions   int
	maxLag          uint64
	maxLagDuration  time.Duration
	replicaID       string
	logLevel        string
	logFormat       string
	shutdownTimeout time.Duration
	drainDelay      time.Duration

	// Transport security and authentication.
	tlsCert, tlsKey, tlsClientCA string
	tlsClientAuth                string
	tlsReload                    time.Duration
	authTokenFile                string
	insecure                     bool
	followCA, followCert         string
	followKey, followServerName  string
	followTokenFile              string

	// Limits.
	limits limits.Config

	// Observability.
	metricsListen string
	pprof         bool

	// JSON gateway.
	gatewayListen string
	corsOrigins   []string
	decisionLog   decisionLogOptions

	// authorization is the `authorization:` section of the config file.
	authorization *authzSection

	// kube are the --kube-source flags (kube.go).
	kube kubeOptions
}

type decisionLogOptions struct {
	output        string
	maxMB         int
	maxBackups    int
	sampleAllowed float64
	sampleDenied  float64
	objects       bool
	masks         []string
}

func newServeCommand() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve [--config FILE] [--listen ADDR] [--data DIR] [--follow ADDR] [--load PATH...]",
		Short: "Run the gRPC decision service on a bbolt store",
		Long: `Run the gRPC decision service (Decision, Sync, Query, Admin, health, reflection).

The store is DIR/arbiter.db. A primary (no --follow) takes writes through Sync
(arbiter push) and --load; a replica started with --follow ADDR streams every
change from the primary at ADDR and refuses writes. Health is NOT_SERVING until
the store is loaded and, for a follower, first synced, and whenever a follower
lags more than --max-lag revisions or --max-lag-duration.

--config FILE reads a YAML file whose keys are these flags' names (listen:,
tls-cert:, max-object-bytes: ...) plus an authorization: section (rules mapping
identities to roles); flags given on the command line override it.

Without --tls-cert the server speaks plaintext, which it does only on a
loopback address unless --insecure is given; with neither TLS nor an
authorization section every caller has every role (development). With TLS,
callers are identified by their client certificate (--tls-client-ca) or a
bearer token (--auth-token-file), and only the authorization rules grant the
write and replicate roles. See docs/operations.md.

SIGINT/SIGTERM drain the server: health goes NOT_SERVING, calls are still
served for --drain-delay, in-flight calls finish (bounded by
--shutdown-timeout), the store is closed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.config != "" {
				sec, err := applyConfigFile(cmd, o.config)
				if err != nil {
					return err
				}
				o.authorization = sec
			}
			return runServe(cmd.Context(), &o)
		},
	}
	addServeFlags(cmd.Flags(), &o)
	return cmd
}

// addServeFlags defines serve's flags on f, bound to o.
func addServeFlags(f *pflag.FlagSet, o *serveOptions) {
	f.StringVar(&o.config, "config", "", "YAML file of flag values and the authorization section (flags override it)")
	f.StringVar(&o.listen, "listen", "127.0.0.1:50051", "gRPC listen address")
	f.StringVar(&o.data, "data", "data", "directory of the bbolt store")
	f.StringVar(&o.follow, "follow", "", "run as a follower of the primary at ADDR")
	f.StringArrayVar(&o.load, "load", nil, "manifests to write into the store at start, one revision (primary only; repeatable)")
	f.IntVar(&o.keepRevisions, "keep-revisions", 10000, "revisions of history kept for followers (older: snapshot)")
	f.Uint64Var(&o.maxLag, "max-lag", 0, "follower: NOT_SERVING when this many revisions behind (0: no limit)")
	f.DurationVar(&o.maxLagDuration, "max-lag-duration", 0, "follower: NOT_SERVING when behind for this long (0: no limit)")
	f.StringVar(&o.replicaID, "replica-id", "", "name of this replica in the primary's status (default: host:listen)")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", "json", "json or text")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "bound on draining in-flight calls")
	f.DurationVar(&o.drainDelay, "drain-delay", 0, "on SIGTERM, keep serving this long after health goes NOT_SERVING (let load balancers notice)")

	f.StringVar(&o.tlsCert, "tls-cert", "", "server certificate (PEM, re-read when it changes); enables TLS")
	f.StringVar(&o.tlsKey, "tls-key", "", "key of --tls-cert")
	f.StringVar(&o.tlsClientCA, "tls-client-ca", "", "CA bundle that signs client certificates (mutual TLS); re-read when it changes")
	f.StringVar(&o.tlsClientAuth, "tls-client-auth", "", "require (every caller presents a certificate) or optional (verified when given); default require, optional with --auth-token-file")
	f.DurationVar(&o.tlsReload, "tls-reload-interval", 5*time.Second, "how often certificate, key and CA files are checked for changes")
	f.StringVar(&o.authTokenFile, "auth-token-file", "", "bearer tokens accepted, one TOKEN,NAME per line (identity token:NAME); re-read when it changes")
	f.BoolVar(&o.insecure, "insecure", false, "allow plaintext gRPC on a non-loopback address (development only)")
	f.StringVar(&o.followCA, "follow-ca-file", "", "follower: CA bundle verifying the primary (default --tls-client-ca, else the system roots)")
	f.StringVar(&o.followCert, "follow-cert-file", "", "follower: client certificate presented to the primary (default --tls-cert)")
	f.StringVar(&o.followKey, "follow-key-file", "", "follower: key of --follow-cert-file (default --tls-key)")
	f.StringVar(&o.followServerName, "follow-server-name", "", "follower: name expected in the primary's certificate (default the host of --follow)")
	f.StringVar(&o.followTokenFile, "follow-token-file", "", "follower: file holding a bearer token sent to the primary")

	f.IntVar(&o.limits.MaxRequestBytes, "max-request-bytes", limits.DefaultMaxRequestBytes, "largest gRPC message accepted")
	f.IntVar(&o.limits.MaxObjectBytes, "max-object-bytes", limits.DefaultMaxObjectBytes, "largest object in a decision request or a write (0: no limit)")
	f.IntVar(&o.limits.MaxBatchObjects, "max-batch-objects", limits.DefaultMaxBatchObjects, "most changes in one write batch (0: no limit)")
	f.IntVar(&o.limits.MaxObjects, "max-objects", limits.DefaultMaxObjects, "most objects in the store; writes that would exceed it are refused (0: no limit)")
	f.Uint64Var(&o.limits.MaxDecisionCost, "max-decision-cost", limits.DefaultMaxDecisionCost, "CEL cost budget of one decision across its policies (0: only the per-expression and per-policy limits)")
	f.Float64Var(&o.limits.RateLimit, "rate-limit", 0, "calls per second allowed to each caller identity (0: unlimited)")
	f.IntVar(&o.limits.RateBurst, "rate-burst", 0, "burst of --rate-limit (default: --rate-limit)")
	f.DurationVar(&o.limits.RPCTimeout, "rpc-timeout", limits.DefaultRPCTimeout, "deadline of unary calls that set none, and the longest one a call may set")

	f.StringVar(&o.gatewayListen, "gateway-listen", "", "HTTP address serving the Decision and Query services as JSON (/v1/..., /openapi.json); HTTPS with --tls-cert (empty: off)")
	f.StringArrayVar(&o.corsOrigins, "cors-origin", nil, `origin allowed to call the JSON gateway from a browser ("*": any; repeatable)`)
	f.StringVar(&o.metricsListen, "metrics-listen", "", "HTTP address serving Prometheus /metrics, /healthz and /readyz (empty: off)")
	f.BoolVar(&o.pprof, "pprof", false, "also serve /debug/pprof/ on --metrics-listen")
	f.StringVar(&o.decisionLog.output, "decision-log", "", "write every decision as a JSON line to FILE, or - for stdout (empty: off)")
	f.IntVar(&o.decisionLog.maxMB, "decision-log-max-mb", 100, "rotate the decision log file at this size in MiB")
	f.IntVar(&o.decisionLog.maxBackups, "decision-log-max-backups", decisionlog.DefaultMaxBackups, "rotated decision log files kept")
	f.Float64Var(&o.decisionLog.sampleAllowed, "decision-log-sample-allowed", 1, "fraction of allowed decisions logged")
	f.Float64Var(&o.decisionLog.sampleDenied, "decision-log-sample-denied", 1, "fraction of denied decisions logged")
	f.BoolVar(&o.decisionLog.objects, "decision-log-objects", false, "include the request's object and oldObject (masked) in decision log lines")
	f.StringArrayVar(&o.decisionLog.masks, "decision-log-mask", decisionlog.DefaultMasks, `field masked in logged objects, KIND:PATH ("*" kind: every kind; "none": no masks; repeatable)`)
	addKubeFlags(f, &o.kube)
}

func newLogger(level, format string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, exitWith(exitLoad, "--log-level: %v", err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(format) {
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	}
	return nil, exitWith(exitLoad, "--log-format: unknown format %q (json, text)", format)
}

func runServe(ctx context.Context, o *serveOptions) error {
	gctune.Apply()
	if ctx == nil {
		ctx = context.Background()
	}
	log, err := newLogger(o.logLevel, o.logFormat)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	if o.follow != "" && len(o.load) > 0 {
		return exitWith(exitLoad, "--load writes to the store; a follower takes its content from the primary")
	}
	if len(o.corsOrigins) > 0 && o.gatewayListen == "" {
		return exitWith(exitLoad, "--cors-origin applies to the JSON gateway: give --gateway-listen")
	}
	if o.pprof && o.metricsListen == "" {
		return exitWith(exitLoad, "--pprof serves on the metrics port: give --metrics-listen")
	}
	sec, err := securityFromOptions(o, log)
	if err != nil {
		return err
	}
	objs, err := apply.ReadObjects(o.load...)
	if err != nil {
		return err
	}

	cfg := server.Config{
		DataDir:           o.data,
		KeepRevisions:     o.keepRevisions,
		Follow:            o.follow,
		MaxLagRevisions:   o.maxLag,
		MaxLagDuration:    o.maxLagDuration,
		Logger:            log,
		Authz:             sec.authz,
		Limits:            o.limits,
		DrainDelay:        o.drainDelay,
		Credentials:       sec.creds,
		FollowDialOptions: sec.followDialOptions,
	}

	tp, stopTracing, err := tracing.Setup(ctx, "arbiter", version())
	if err != nil {
		return exitWith(exitLoad, "tracing: %v", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = stopTracing(sctx)
	}()
	if tp != nil {
		cfg.TracerProvider = tp
		cfg.GRPCOptions = append(cfg.GRPCOptions, tracing.ServerOption(tp))
		cfg.FollowDialOptions = append(cfg.FollowDialOptions, tracing.DialOption(tp))
		log.Info("tracing on (OTEL_* environment)")
	} else {
		// No tracing: decisions make no spans (the global provider's
		// non-recording spans cost a microsecond each).
		cfg.TracerProvider = noop.NewTracerProvider()
	}

	var reg *metrics.Metrics
	if o.metricsListen != "" {
		reg = metrics.New()
		cfg.Metrics = reg
	}
	if o.decisionLog.output != "" {
		dl, err := openDecisionLog(&o.decisionLog)
		if err != nil {
			return exitWith(exitLoad, "%v", err)
		}
		defer func() {
			if err := dl.Close(); err != nil {
				log.Error("closing the decision log", "err", err)
			}
		}()
		cfg.DecisionLog = dl
		if reg != nil {
			reg.RegisterCounterFunc("arbiter_decision_log_dropped_total", "Decision log lines dropped because the writer fell behind.",
				func() float64 { return float64(dl.Dropped()) })
		}
		log.Info("decision log on", "output", o.decisionLog.output, "objects", o.decisionLog.objects,
			"sample_allowed", o.decisionLog.sampleAllowed, "sample_denied", o.decisionLog.sampleDenied)
	}

	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return exitWith(exitLoad, "listening on %s: %v", o.listen, err)
	}
	replicaID := o.replicaID
	if replicaID == "" {
		host, _ := os.Hostname()
		replicaID = host + "/" + lis.Addr().String()
	}
	cfg.ReplicaID = replicaID
	srv, err := server.New(ctx, cfg)
	if err != nil {
		lis.Close()
		return exitWith(exitLoad, "%v", err)
	}
	if err := startKube(srv, o, lis.Addr().String(), log); err != nil {
		srv.Shutdown(context.Background())
		lis.Close()
		return err
	}
	if reg != nil {
		reg.RegisterState(srv.State)
	}
	if len(objs) > 0 {
		commit, err := srv.LoadObjects(ctx, objs)
		if err != nil {
			srv.Shutdown(context.Background())
			return exitWith(exitLoad, "--load: %v", err)
		}
		log.Info("loaded manifests", "objects", len(objs), "revision", commit.Revision, "digest", commit.Digest, "unchanged", commit.Unchanged)
	}
	var metricsSrv *http.Server
	if reg != nil {
		mlis, err := net.Listen("tcp", o.metricsListen)
		if err != nil {
			srv.Shutdown(context.Background())
			return exitWith(exitLoad, "--metrics-listen %s: %v", o.metricsListen, err)
		}
		metricsSrv = &http.Server{Handler: reg.Handler(o.pprof, srv.Serving), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := metricsSrv.Serve(mlis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server", "err", err)
			}
		}()
		log.Info("metrics", "listen", mlis.Addr().String(), "pprof", o.pprof)
	}
	var gatewaySrv *http.Server
	if o.gatewayListen != "" {
		gatewaySrv, err = startGateway(ctx, srv, o, sec, log)
		if err != nil {
			srv.Shutdown(context.Background())
			stopHTTP(metricsSrv)
			return err
		}
	}
	sigCtx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	role := "primary"
	if o.follow != "" {
		role = "follower of " + o.follow
	}
	log.Info("serving", "listen", lis.Addr().String(), "role", role, "data", o.data, "tls", o.tlsCert != "",
		"client_certificates", sec.clientAuth, "authorization", sec.summary)
	stopMetrics := func() {
		stopHTTP(gatewaySrv)
		stopHTTP(metricsSrv)
	}
	select {
	case err := <-errc:
		srv.Shutdown(context.Background())
		stopMetrics()
		if err != nil {
			return exitWith(exitLoad, "serving: %v", err)
		}
		return nil
	case <-sigCtx.Done():
	}
	log.Info("shutting down", "drain_delay", o.drainDelay, "timeout", o.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), o.drainDelay+o.shutdownTimeout)
	defer cancel()
	srv.Shutdown(sctx)
	stopMetrics()
	if err := <-errc; err != nil {
		return fmt.Errorf("serving: %w", err)
	}
	return nil
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

// startGateway serves the JSON gateway on --gateway-listen: HTTPS with the
// server's certificate when TLS is on, calling the in-process gRPC server
// so every interceptor applies.
func startGateway(ctx context.Context, srv *server.Server, o *serveOptions, sec *security, log *slog.Logger) (*http.Server, error) {
	conn, err := srv.GatewayConn(ctx)
	if err != nil {
		return nil, exitWith(exitLoad, "--gateway-listen: %v", err)
	}
	h, err := gateway.New(ctx, conn, gateway.Options{CORSOrigins: o.corsOrigins})
	if err != nil {
		conn.Close()
		return nil, exitWith(exitLoad, "--gateway-listen: %v", err)
	}
	glis, err := net.Listen("tcp", o.gatewayListen)
	if err != nil {
		conn.Close()
		return nil, exitWith(exitLoad, "--gateway-listen %s: %v", o.gatewayListen, err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 1 << 20}
	hs.RegisterOnShutdown(func() { conn.Close() })
	if sec.tlsConfig != nil {
		// The gRPC configuration offers only h2; HTTP clients may speak
		// HTTP/1.1 too.
		base := sec.tlsConfig
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
	log.Info("JSON gateway", "listen", glis.Addr().String(), "tls", sec.tlsConfig != nil, "cors_origins", o.corsOrigins)
	return hs, nil
}

func openDecisionLog(o *decisionLogOptions) (*decisionlog.Logger, error) {
	masks := o.masks
	if len(masks) == 1 && masks[0] == "none" {
		masks = []string{}
	}
	return decisionlog.New(decisionlog.Config{
		Output:         o.output,
		MaxSize:        int64(o.maxMB) << 20,
		MaxBackups:     o.maxBackups,
		SampleAllowed:  &o.sampleAllowed,
		SampleDenied:   &o.sampleDenied,
		IncludeObjects: o.objects,
		Masks:          masks,
	})
}
