package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/arbiter-pdp/arbiter/client"
)

// RunConfig is what Run serves: the shim's HTTPS listener and its
// connection to the decision service.
type RunConfig struct {
	// Listen is the HTTPS listen address, served with Certs.
	Listen string
	Certs  *CertReloader
	// Server is the decision service's gRPC target, dialled with
	// ClientOptions (and DialOptions); Transport describes them in the
	// "serving" log line.
	Server        string
	ClientOptions []client.Option
	Transport     string
	// Handler configures the handler; Run sets its Client.
	Handler Config
	// Signals end the serving, as ctx does: the listener stops accepting,
	// in-flight reviews finish within ShutdownTimeout.
	Signals         []os.Signal
	ShutdownTimeout time.Duration
}

// Run serves admission reviews until ctx is done or a signal of
// cfg.Signals arrives, then shuts down. It returns nil after an orderly
// shutdown, and an error when something cannot start or serving fails.
func Run(ctx context.Context, cfg RunConfig) error {
	log := cfg.Handler.Logger
	if log == nil {
		log = slog.Default()
	}
	c, err := client.Dial(ctx, cfg.Server, append(cfg.ClientOptions, client.WithDialOptions(DialOptions()...))...)
	if err != nil {
		return err
	}
	defer c.Close()
	hc := cfg.Handler
	hc.Client = c
	h, err := New(hc)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %v", cfg.Listen, err)
	}
	srv := NewServer(cfg.Listen, h, cfg.Certs, log)
	var sigCtx context.Context
	var stop context.CancelFunc
	if len(cfg.Signals) > 0 {
		sigCtx, stop = signal.NotifyContext(ctx, cfg.Signals...)
	} else { // (signal.NotifyContext without signals would take every one)
		sigCtx, stop = context.WithCancel(ctx)
	}
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(lis, "", "") }()
	log.Info("serving admission reviews", "listen", lis.Addr().String(), "server", cfg.Server, "server_tls", cfg.Transport,
		"timeout", cfg.Handler.Timeout, "max_body", cfg.Handler.MaxBodyBytes, "monotonic", cfg.Handler.Monotonic)
	select {
	case err := <-errc:
		return fmt.Errorf("serving: %v", err)
	case <-sigCtx.Done():
	}
	log.Info("shutting down", "timeout", cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("shutdown", "error", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving: %w", err)
	}
	return nil
}
