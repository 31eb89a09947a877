package server_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-pdp/arbiter/client"
	"github.com/arbiter-pdp/arbiter/decisionlog"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/server"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRunServesAndShutsDownInOrder: Run starts the server, --load's
// objects, the metrics endpoint and the decision log, serves until its
// context ends, then shuts down and returns nil; the Start hook's
// shutdown callback runs.
func TestRunServesAndShutsDownInOrder(t *testing.T) {
	var logs lockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	dir := t.TempDir()
	ns := manifest.NewObject("ns.yaml", map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "team-a"}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := make(chan string, 1)
	stopped := make(chan struct{})
	cfg := server.RunConfig{
		Server:        server.Config{DataDir: dir, NoSync: true, Logger: log},
		Listen:        "127.0.0.1:0",
		Load:          []*manifest.Object{ns},
		MetricsListen: "127.0.0.1:0",
		DecisionLog:   &decisionlog.Config{Output: dir + "/decisions.log"},
		Start: func(srv *server.Server, listen string) error {
			srv.OnShutdown(func(context.Context) { close(stopped) })
			addr <- listen
			return nil
		},
		ShutdownTimeout: 5 * time.Second,
	}
	done := make(chan error, 1)
	go func() { done <- server.Run(ctx, cfg) }()
	var a string
	select {
	case a = <-addr:
	case err := <-done:
		t.Fatalf("Run ended: %v", err)
	}
	c, err := client.Dial(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := c.Status(ctx)
		if err == nil && st.GetRevision() == 1 && st.GetObjects() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status: %v %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	select {
	case <-stopped:
	default:
		t.Error("the Start hook's shutdown callback did not run")
	}
	for _, want := range []string{"decision log on", "loaded manifests", "msg=metrics", "msg=serving", "shutting down"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no %q in the logs:\n%s", want, logs.String())
		}
	}
}

// TestRunStartErrors: what cannot start is an error naming it, and what
// was started is stopped: every case opens the same store, which a run
// that left it open would hold locked.
func TestRunStartErrors(t *testing.T) {
	dir := t.TempDir()
	base := server.Config{DataDir: dir, NoSync: true, Logger: quietLogger()}
	hookErr := errors.New("the hook refused")
	for name, tc := range map[string]struct {
		cfg  server.RunConfig
		want string
	}{
		"listen":  {server.RunConfig{Server: base, Listen: "256.0.0.1:1"}, "listening on 256.0.0.1:1"},
		"hook":    {server.RunConfig{Server: base, Listen: "127.0.0.1:0", Start: func(*server.Server, string) error { return hookErr }}, "the hook refused"},
		"metrics": {server.RunConfig{Server: base, Listen: "127.0.0.1:0", MetricsListen: "256.0.0.1:1"}, "--metrics-listen 256.0.0.1:1"},
		"gateway": {server.RunConfig{Server: base, Listen: "127.0.0.1:0", GatewayListen: "256.0.0.1:1"}, "--gateway-listen 256.0.0.1:1"},
	} {
		err := server.Run(context.Background(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}
