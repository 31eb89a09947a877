package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/arbiter-pdp/arbiter/client"
	"github.com/arbiter-pdp/arbiter/client/webhook"
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

func runWebhook(ctx context.Context, o *webhookOptions) error {
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
	c, err := dialServer(ctx, o.server, client.WithDialOptions(webhook.DialOptions()...))
	if err != nil {
		return exitWith(exitLoad, "%v", err)
	}
	defer c.Close()
	h, err := webhook.New(webhook.Config{
		Client:        c,
		Timeout:       o.timeout,
		MaxBodyBytes:  maxBody,
		ReadyCacheTTL: o.readyCache,
		Monotonic:     o.monotonic,
		Logger:        log,
	})
	if err != nil {
		return exitWith(exitLoad, "%v", err)
	}
	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return exitWith(exitLoad, "listening on %s: %v", o.listen, err)
	}
	srv := webhook.NewServer(o.listen, h, certs, log)
	sigCtx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(lis, "", "") }()
	log.Info("serving admission reviews", "listen", lis.Addr().String(), "server", o.server,
		"timeout", o.timeout, "max_body", maxBody, "monotonic", o.monotonic)
	select {
	case err := <-errc:
		return exitWith(exitLoad, "serving: %v", err)
	case <-sigCtx.Done():
	}
	log.Info("shutting down", "timeout", o.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("shutdown", "error", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving: %w", err)
	}
	return nil
}
