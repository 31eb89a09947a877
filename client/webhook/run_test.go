package webhook_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-pdp/arbiter/client/webhook"
	"github.com/arbiter-pdp/arbiter/server"
)

// TestRun: Run serves the shim until its context ends, then shuts down
// and returns nil; an address it cannot listen on is an error naming it.
func TestRun(t *testing.T) {
	ds := startDecisionServer(t, server.Config{}, pssDir)
	certs := newCertFiles(t, t.TempDir())
	reloader, err := webhook.NewCertReloader(certs.certPath(), certs.keyPath(), quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg := webhook.RunConfig{Listen: addr, Certs: reloader, Server: ds.addr, Handler: webhook.Config{Logger: quietLogger()}, ShutdownTimeout: 5 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- webhook.Run(ctx, cfg) }()
	hc := certs.httpClient()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := hc.Get("https://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}

	cfg.Listen = "256.0.0.1:1"
	if err := webhook.Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "listening on 256.0.0.1:1") {
		t.Fatalf("bad listen address: %v", err)
	}
}
