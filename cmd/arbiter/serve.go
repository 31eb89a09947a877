package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/arbiter-pdp/arbiter/server"
)

type serveOptions struct {
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
}

func newServeCommand() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve [--listen ADDR] [--data DIR] [--follow ADDR] [--load PATH...]",
		Short: "Run the gRPC decision service on a bbolt store",
		Long: `Run the gRPC decision service (Decision, Sync, Query, health, reflection).

The store is DIR/arbiter.db. A primary (no --follow) takes writes through Sync
(arbiter push) and --load; a replica started with --follow ADDR streams every
change from the primary at ADDR and refuses writes. Health is NOT_SERVING until
the store is loaded and, for a follower, first synced, and whenever a follower
lags more than --max-lag revisions or --max-lag-duration.

SIGINT/SIGTERM drain the server: health goes NOT_SERVING, in-flight calls
finish (bounded by --shutdown-timeout), the store is closed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd.Context(), &o)
		},
	}
	f := cmd.Flags()
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
	return cmd
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
	objs, err := readObjects(o.load...)
	if err != nil {
		return err
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
	srv, err := server.New(ctx, server.Config{
		DataDir:         o.data,
		KeepRevisions:   o.keepRevisions,
		Follow:          o.follow,
		ReplicaID:       replicaID,
		MaxLagRevisions: o.maxLag,
		MaxLagDuration:  o.maxLagDuration,
		Logger:          log,
	})
	if err != nil {
		lis.Close()
		return exitWith(exitLoad, "%v", err)
	}
	if len(objs) > 0 {
		commit, err := srv.LoadObjects(ctx, objs)
		if err != nil {
			srv.Shutdown(context.Background())
			return exitWith(exitLoad, "--load: %v", err)
		}
		log.Info("loaded manifests", "objects", len(objs), "revision", commit.Revision, "digest", commit.Digest, "unchanged", commit.Unchanged)
	}
	sigCtx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	role := "primary"
	if o.follow != "" {
		role = "follower of " + o.follow
	}
	log.Info("serving", "listen", lis.Addr().String(), "role", role, "data", o.data)
	select {
	case err := <-errc:
		srv.Shutdown(context.Background())
		if err != nil {
			return exitWith(exitLoad, "serving: %v", err)
		}
		return nil
	case <-sigCtx.Done():
	}
	log.Info("shutting down", "timeout", o.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	srv.Shutdown(sctx)
	if err := <-errc; err != nil {
		return fmt.Errorf("serving: %w", err)
	}
	return nil
}
