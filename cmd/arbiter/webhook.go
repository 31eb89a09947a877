package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/arbiter-pdp/arbiter/client"
	"github.com/arbiter-pdp/arbiter/client/webhook"
	"github.com/arbiter-pdp/arbiter/internal/certs"
	"github.com/arbiter-pdp/arbiter/internal/gctune"
)

type webhookOptions struct {
	listen          string
	server          string
	cert            string
	key             string
	timeout         time.Duration
	maxBody         string
	readyCache      time.Duration
	monotonic       bool
	logLevel        string
	logFormat       string
	shutdownTimeout time.Duration

	// The connection to the decision service.
	serverCA, serverCert, serverKey string
	serverName, serverTokenFile     string
	serverInsecure                  bool
}

func newWebhookCommand() *cobra.Command {
	var o webhookOptions
	cmd := &cobra.Command{
		Use:   "webhook --listen ADDR --server ADDR --cert FILE --key FILE",
		Short: "Run the admission webhook shim: HTTPS POST /validate → Decide",
		Long: `Run the admission webhook shim: an HTTPS server that decodes the
AdmissionReview (admission.k8s.io/v1, or v1beta1) the API server posts to
/validate, asks the decision service at --server (Decide over gRPC), and
answers an AdmissionReview: uid, allowed, status, warnings, and audit
annotations carrying the decision's revision and id.

When the decision service is unreachable, errors or misses the deadline
(--timeout, below the webhook's timeoutSeconds), the shim answers HTTP 500
so the API server applies the webhook's failurePolicy: it never turns an
error into an allow. Bodies over --max-body are refused with 413.

/healthz answers while the process runs; /readyz when the decision service
answers gRPC health SERVING. The certificate and key are reloaded when the
files change. --server may be a headless Service (dns:///NAME:PORT): calls
are spread over its replicas, skipping those that are not SERVING.

The connection to the decision service uses TLS when --server-ca-file (or
--server-cert-file, --server-name, --server-token-file) is given: the server
is verified against --server-ca-file (else the system roots) and, for mutual
TLS, the shim presents --server-cert-file/--server-key-file. These files are
re-read when they change. Plaintext is allowed only to a loopback address or
a unix socket, unless --server-insecure is given. The global --ca-file,
--cert-file, --key-file, --token-file, --tls (ARBITER_* variables) apply
when the --server-* flag of the same file is not given.

SIGINT/SIGTERM stop accepting connections and let in-flight reviews finish
(bounded by --shutdown-timeout).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runWebhook(cmd.Context(), &o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", ":8443", "HTTPS listen address")
	f.StringVar(&o.server, "server", "127.0.0.1:50051", "gRPC address of the decision service (dns:///NAME:PORT for every replica of a headless Service)")
	f.StringVar(&o.cert, "cert", "", "TLS certificate file (PEM; reloaded when it changes)")
	f.StringVar(&o.key, "key", "", "TLS private key file (PEM; reloaded when it changes)")
	f.DurationVar(&o.timeout, "timeout", webhook.DefaultTimeout, "deadline of a Decide call; keep it below the webhook's timeoutSeconds")
	f.StringVar(&o.maxBody, "max-body", "3MiB", "largest AdmissionReview accepted (bytes, or with KiB, MiB, GiB); larger: 413")
	f.DurationVar(&o.readyCache, "ready-cache", webhook.DefaultReadyCacheTTL, "how long /readyz reuses the decision service's health answer")
	f.BoolVar(&o.monotonic, "monotonic", false, "demand at least the highest revision seen so far in every decision (min_revision)")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error (debug logs every decision; info the denials)")
	f.StringVar(&o.logFormat, "log-format", "json", "json or text")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "bound on finishing in-flight reviews at shutdown")
	f.StringVar(&o.serverCA, "server-ca-file", "", "CA bundle verifying the decision service's certificate; turns on TLS (re-read when it changes)")
	f.StringVar(&o.serverCert, "server-cert-file", "", "client certificate presented to the decision service (mutual TLS; re-read when it changes)")
	f.StringVar(&o.serverKey, "server-key-file", "", "key of --server-cert-file")
	f.StringVar(&o.serverName, "server-name", "", "name expected in the decision service's certificate (default: the host of --server); turns on TLS [ARBITER_SERVER_NAME]")
	f.StringVar(&o.serverTokenFile, "server-token-file", "", "file holding a bearer token sent with each call to the decision service; turns on TLS (re-read when it changes)")
	f.BoolVar(&o.serverInsecure, "server-insecure", false, "allow plaintext gRPC to a decision service that is not on a loopback address (development only)")
	_ = cmd.MarkFlagRequired("cert")
	_ = cmd.MarkFlagRequired("key")
	return cmd
}

// parseSize reads a byte count: a number, optionally followed by B, KiB,
// MiB or GiB (or Ki, Mi, Gi; K, M and G are powers of 1000).
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
		{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30},
		{"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000},
		{"K", 1000}, {"M", 1000 * 1000}, {"G", 1000 * 1000 * 1000},
		{"B", 1},
	}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("not a positive size: %q", s)
	}
	return n * mult, nil
}

// serverConn is how the shim reaches the decision service.
type serverConn struct {
	options []client.Option
	// summary describes the transport for the startup log.
	summary string
}

// webhookServerConn turns the --server-* flags (else the global --ca-file,
// --cert-file, --key-file, --token-file, --server-name, --tls and their
// ARBITER_* variables) into client options. TLS files are re-read when they
// change (internal/certs). Plaintext is refused to anything but a loopback
// address or a unix socket unless --server-insecure.
func webhookServerConn(ctx context.Context, o *webhookOptions, log *slog.Logger) (*serverConn, error) {
	cf, _ := ctx.Value(connKey{}).(*connFlags)
	if cf == nil {
		cf = envConnFlags()
	}
	files := certs.Files{CA: cmp.Or(o.serverCA, cf.caFile), Cert: cmp.Or(o.serverCert, cf.certFile), Key: cmp.Or(o.serverKey, cf.keyFile)}
	serverName := cmp.Or(o.serverName, cf.serverName)
	tokenFile := cmp.Or(o.serverTokenFile, cf.tokenFile)
	tlsOn := cf.tls || files.CA != "" || files.Cert != "" || files.Key != "" || serverName != "" || o.serverTokenFile != ""
	sc := &serverConn{}
	switch {
	case tlsOn && o.serverInsecure:
		return nil, exitWith(exitLoad, "--server-insecure and the TLS flags (--server-ca-file, --server-cert-file, --server-name, ...) contradict each other: drop one")
	case !tlsOn && tokenFile != "":
		return nil, exitWith(exitLoad, "--token-file needs TLS to the decision service (bearer tokens are never sent in plaintext): give --server-ca-file")
	case !tlsOn && !o.serverInsecure && !localTarget(o.server):
		return nil, exitWith(exitLoad, "refusing to call the decision service at %s over plaintext: it is not a loopback address; give --server-ca-file (and --server-cert-file/--server-key-file for mutual TLS), or --server-insecure for development", o.server)
	case !tlsOn:
		sc.summary = "plaintext"
		if o.serverInsecure && !localTarget(o.server) {
			sc.summary = "INSECURE plaintext"
			log.Warn("INSECURE: calling the decision service over plaintext gRPC: admission requests and decisions are neither encrypted nor authenticated; use --server-ca-file (and --server-cert-file/--server-key-file) outside development",
				"server", o.server)
		}
		return sc, nil
	}
	r, err := certs.New(files, certs.Options{Logger: log})
	if err != nil {
		return nil, exitWith(exitLoad, "TLS to the decision service: %v", err)
	}
	sc.options = append(sc.options, client.WithTransportCredentials(credentials.NewTLS(r.ClientConfig(serverName))))
	sc.summary = "TLS"
	if files.Cert != "" {
		sc.summary = "mutual TLS"
	}
	if tokenFile != "" {
		tc, err := client.TokenFileCredentials(tokenFile)
		if err != nil {
			return nil, exitWith(exitLoad, "--server-token-file: %v", err)
		}
		sc.options = append(sc.options, client.WithDialOptions(grpc.WithPerRPCCredentials(tc)))
		sc.summary += " + bearer token"
	}
	return sc, nil
}

// localTarget says whether a gRPC target (host:port, dns:///host:port,
// passthrough:///host:port, unix:path) stays on this machine: a loopback
// address or a unix socket.
func localTarget(target string) bool {
	if u, err := url.Parse(target); err == nil {
		switch u.Scheme {
		case "unix", "unix-abstract":
			return true
		case "dns", "passthrough":
			endpoint := u.Path
			if endpoint == "" {
				endpoint = u.Opaque
			}
			return isLoopback(strings.TrimPrefix(endpoint, "/"))
		}
	}
	return isLoopback(target)
}

func runWebhook(ctx context.Context, o *webhookOptions) error {
	gctune.Apply()
	if ctx == nil {
		ctx = context.Background()
	}
	log, err := newLogger(o.logLevel, o.logFormat)
	if err != nil {
		return err
	}
	maxBody, err := parseSize(o.maxBody)
	if err != nil {
		return exitWith(exitLoad, "--max-body: %v", err)
	}
	if o.timeout <= 0 {
		return exitWith(exitLoad, "--timeout must be positive")
	}
	certs, err := webhook.NewCertReloader(o.cert, o.key, log)
	if err != nil {
		return exitWith(exitLoad, "%v", err)
	}
	conn, err := webhookServerConn(ctx, o, log)
	if err != nil {
		return err
	}
	return webhook.Run(ctx, webhook.RunConfig{
		Listen:        o.listen,
		Certs:         certs,
		Server:        o.server,
		ClientOptions: conn.options,
		Transport:     conn.summary,
		Handler: webhook.Config{
			Timeout:       o.timeout,
			MaxBodyBytes:  maxBody,
			ReadyCacheTTL: o.readyCache,
			Monotonic:     o.monotonic,
			Logger:        log,
		},
		Signals:         []os.Signal{os.Interrupt, syscall.SIGTERM},
		ShutdownTimeout: o.shutdownTimeout,
	})
}
