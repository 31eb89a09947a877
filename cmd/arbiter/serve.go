package main

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/arbiter-pdp/arbiter/apply"
	"github.com/arbiter-pdp/arbiter/callout"
	"github.com/arbiter-pdp/arbiter/decisionlog"
	"github.com/arbiter-pdp/arbiter/imagedata"
	"github.com/arbiter-pdp/arbiter/imageverify"
	"github.com/arbiter-pdp/arbiter/internal/gctune"
	"github.com/arbiter-pdp/arbiter/server"
	"github.com/arbiter-pdp/arbiter/server/limits"
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
	// callout and imageData are the `callout:` and `imageData:` sections:
	// the calls out of http.* and resource.Post, and image.GetMetadata's
	// registry access (nil: not configured; such calls are errors).
	callout   *callout.Config
	imageData *imagedata.Config
	// imageVerification is the `imageVerification:` section, images the
	// --image-verification-config and --no-image-verification flags: the
	// image verifier of ImageValidatingPolicies.
	imageVerification *imageverify.Config
	images            imageVerifierFlags

	// kube are the --kube-source flags (kube.go).
	kube kubeOptions

	// storeSecrets lets writes store v1 Secrets as context objects.
	storeSecrets bool
	// calloutClient is the client of the callout section (nil: none): the
	// Kubernetes source fetches GlobalContextEntries' apiCall.service with it.
	calloutClient *callout.Client
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
				sec, err := applyConfigSections(cmd, o.config)
				if err != nil {
					return err
				}
				o.authorization, o.callout, o.imageData = sec.authorization, sec.callout, sec.imageData
				o.imageVerification = sec.imageVerification
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
	f.BoolVar(&o.storeSecrets, "store-secrets", false, "store v1 Secrets written as context objects (refused by default: policies, backups and followers would see their data)")
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
	o.images.add(f)
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
	// started is the server once it exists (what the image verifier
	// reads pull secrets from).
	var started atomic.Pointer[server.Server]
	cfg := server.RunConfig{
		Server: server.Config{
			DataDir:           o.data,
			KeepRevisions:     o.keepRevisions,
			Follow:            o.follow,
			MaxLagRevisions:   o.maxLag,
			MaxLagDuration:    o.maxLagDuration,
			ReplicaID:         o.replicaID,
			Logger:            log,
			Authz:             sec.Authz,
			Limits:            o.limits,
			DrainDelay:        o.drainDelay,
			Credentials:       sec.Credentials,
			FollowDialOptions: sec.FollowDialOptions,
			StoreSecrets:      o.storeSecrets,
			// Mutate-existing MutatingPolicies need a cluster to update
			// (kube.go); a follower stores what its primary committed.
			MutateExisting: o.kube.enabled && o.kube.mutateExisting || o.follow != "",
		},
		Listen:         o.listen,
		Load:           objs,
		ServiceVersion: version(),
		MetricsListen:  o.metricsListen,
		Pprof:          o.pprof,
		GatewayListen:  o.gatewayListen,
		CORSOrigins:    o.corsOrigins,
		GatewayTLS:     sec.TLSConfig,
		Start: func(srv *server.Server, listen string) error {
			started.Store(srv)
			return startKube(srv, o, listen, log)
		},
		Signals:            []os.Signal{os.Interrupt, syscall.SIGTERM},
		ShutdownTimeout:    o.shutdownTimeout,
		TLS:                o.tlsCert != "",
		ClientCertificates: sec.ClientCertificates,
		Authorization:      sec.Authorization,
	}
	if o.decisionLog.output != "" {
		cfg.DecisionLog = decisionLogConfig(&o.decisionLog)
	}
	if err := configureCalls(&cfg.Server, o, log, &started); err != nil {
		return err
	}
	return server.Run(ctx, cfg)
}

// decisionLogConfig is the decision log the --decision-log flags ask for.
func decisionLogConfig(o *decisionLogOptions) *decisionlog.Config {
	masks := o.masks
	if len(masks) == 1 && masks[0] == "none" {
		masks = []string{}
	}
	return &decisionlog.Config{
		Output:         o.output,
		MaxSize:        int64(o.maxMB) << 20,
		MaxBackups:     o.maxBackups,
		SampleAllowed:  &o.sampleAllowed,
		SampleDenied:   &o.sampleDenied,
		IncludeObjects: o.objects,
		Masks:          masks,
	}
}

// configureCalls gives the server the clients of the config file's
// callout and imageData sections: http.* and resource.Post (through the
// Kubernetes API server of --kube-source, when given) and
// image.GetMetadata. Without a section those calls are error results
// naming what is not configured. ImageValidatingPolicies get the image
// verifier of the imageVerification section or
// --image-verification-config (defaults without either), unless
// --no-image-verification.
//
// The verifier resolves a policy's credentials.secrets from the Secrets
// the server stores (--store-secrets, or the Kubernetes source): a bare
// name of a cluster-wide policy names a Secret of $POD_NAMESPACE (the
// service account's namespace in a cluster, else default), as Kyverno's
// name Secrets of its own namespace.
func configureCalls(cfg *server.Config, o *serveOptions, log *slog.Logger, started *atomic.Pointer[server.Server]) error {
	if o.callout != nil {
		opts := callout.Options{Logger: log}
		if o.kube.enabled {
			rc, err := kubeRestConfig(o.kube.kubeconfig)
			if err != nil {
				return exitWith(exitLoad, "callout: %v", err)
			}
			opts.Kube = rc
		}
		c, err := callout.New(*o.callout, opts)
		if err != nil {
			return exitWith(exitLoad, "--config: callout: %v", err)
		}
		cfg.HTTP = c
		o.calloutClient = c
		if opts.Kube != nil {
			cfg.Poster = c
		}
	}
	if o.imageData != nil {
		f, err := imagedata.New(*o.imageData, imagedata.Options{Logger: log})
		if err != nil {
			return exitWith(exitLoad, "--config: imageData: %v", err)
		}
		cfg.ImageData = f
	}
	secretsNamespace := podNamespace()
	secrets := func(namespace string, names []string) authn.Keychain {
		srv := started.Load()
		if srv == nil {
			return authn.NewMultiKeychain()
		}
		if namespace == "" {
			namespace = secretsNamespace
		}
		return srv.PullSecretsKeychain(namespace, names)
	}
	iv, err := o.images.build(o.imageVerification, imageverify.Options{Logger: log, SecretKeychain: secrets})
	if err != nil {
		return err
	}
	if iv != nil {
		cfg.ImageVerifier = iv
		c := iv.Config()
		log.Info("image verification on", "timeout", time.Duration(c.Timeout), "cache_ttl", time.Duration(c.CacheTTL),
			"max_concurrent", c.MaxConcurrent, "insecure_registries", c.InsecureRegistries, "trusted_root", c.TrustedRoot != "")
	}
	return nil
}
