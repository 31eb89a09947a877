package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/arbiter-pdp/arbiter/internal/certs/certstest"
	"github.com/arbiter-pdp/arbiter/server/authz"
)

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitLoad
}

func TestConfigFileFlagsOverride(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "arbiter.yaml")
	if err := os.WriteFile(cfgPath, []byte(`
listen: 127.0.0.1:6000
data: /var/lib/arbiter
max-object-bytes: 4096
rate-limit: 2.5
rpc-timeout: 3s
decision-log-objects: true
decision-log-mask: ["Secret:object.data", "*:object.spec.env"]
load: [a.yaml, b.yaml]
authorization:
  rules:
    - identity: cn:pusher
      roles: [write, read]
  anonymous: [decide]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var o serveOptions
	cmd := &cobra.Command{Use: "serve", RunE: func(c *cobra.Command, _ []string) error {
		az, err := applyConfigFile(c, cfgPath)
		if err != nil {
			return err
		}
		o.authorization = az
		return nil
	}}
	addServeFlags(cmd.Flags(), &o)
	cmd.SetArgs([]string{"--config", cfgPath, "--listen", "127.0.0.1:7000", "--data", "here"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if o.listen != "127.0.0.1:7000" || o.data != "here" {
		t.Fatalf("flags did not override the file: listen %s data %s", o.listen, o.data)
	}
	if o.limits.MaxObjectBytes != 4096 || o.limits.RateLimit != 2.5 || o.limits.RPCTimeout != 3*time.Second || !o.decisionLog.objects {
		t.Fatalf("file values not applied: %+v %+v", o.limits, o.decisionLog)
	}
	if strings.Join(o.decisionLog.masks, " ") != "Secret:object.data *:object.spec.env" || strings.Join(o.load, " ") != "a.yaml b.yaml" {
		t.Fatalf("lists: masks %v load %v", o.decisionLog.masks, o.load)
	}
	if o.authorization == nil || len(o.authorization.Rules) != 1 || o.authorization.Rules[0].Identity != "cn:pusher" ||
		len(o.authorization.Anonymous) != 1 || o.authorization.Anonymous[0] != authz.RoleDecide {
		t.Fatalf("authorization: %+v", o.authorization)
	}

	for name, text := range map[string]string{
		"unknown key":    "listne: 1\n",
		"bad role":       "authorization: {rules: [{identity: 'cn:x', roles: [admin]}]}\n",
		"unknown field":  "authorization: {rulez: []}\n",
		"list for value": "listen: [a, b]\n",
		"bad value":      "max-objects: lots\n",
		"not a map":      "- a\n",
	} {
		if err := os.WriteFile(cfgPath, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := newServeCommand()
		if _, err := applyConfigFile(cmd, cfgPath); exitCode(err) != exitLoad {
			t.Errorf("%s: %v, want exit 2", name, err)
		}
	}
}

func TestLoopbackAndInsecure(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:1": true, "localhost:1": true, "[::1]:1": true, "127.3.4.5:1": true,
		":1": false, "0.0.0.0:1": false, "10.0.0.1:1": false, "arbiter:1": false, "garbage": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v", addr, got)
		}
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	o := &serveOptions{listen: "0.0.0.0:50051"}
	_, err := securityFromOptions(o, log)
	if exitCode(err) != exitLoad || !strings.Contains(err.Error(), "--insecure") {
		t.Fatalf("plaintext on all interfaces: %v", err)
	}
	o.insecure = true
	sec, err := securityFromOptions(o, log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "INSECURE") || !sec.authz.Config().Disabled {
		t.Fatalf("insecure mode: disabled=%v logs %s", sec.authz.Config().Disabled, logs.String())
	}
	// A follower dialling a non-loopback primary in plaintext is refused too.
	o = &serveOptions{listen: "127.0.0.1:0", follow: "primary.example:50051"}
	if _, err := securityFromOptions(o, log); exitCode(err) != exitLoad || !strings.Contains(err.Error(), "plaintext") {
		t.Fatalf("plaintext follow: %v", err)
	}
	o = &serveOptions{listen: "127.0.0.1:0", tlsCert: "x", insecure: true}
	if _, err := securityFromOptions(o, log); exitCode(err) != exitLoad {
		t.Fatalf("--insecure with TLS: %v", err)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// runCLI runs the arbiter command line in-process.
func runCLI(t *testing.T, ctx context.Context, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(io.Discard)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

// TestServeWithMutualTLS runs arbiter serve with TLS, client certificates
// and an authorization section, then drives it with the CLI: push needs the
// write role, status works for any authenticated caller, plaintext and
// certificate-less calls fail, and backup then restore gives the same digest.
func TestServeWithMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "ca")
	srv := ca.Issue(t, "server", certstest.Spec{CommonName: "arbiter", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true})
	pusher := ca.Issue(t, "pusher", certstest.Spec{CommonName: "pusher", Client: true})
	viewer := ca.Issue(t, "viewer", certstest.Spec{CommonName: "viewer", Client: true})
	backup := ca.Issue(t, "backup", certstest.Spec{CommonName: "backup", Client: true})
	addr := freePort(t)
	cfg := filepath.Join(dir, "arbiter.yaml")
	if err := os.WriteFile(cfg, []byte(`
tls-cert: `+srv.CertFile+`
tls-key: `+srv.KeyFile+`
tls-client-ca: `+ca.File+`
max-objects: 1000
authorization:
  rules:
    - {identity: "cn:pusher", roles: [write]}
    - {identity: "cn:backup", roles: [replicate]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		_, err := runCLI(t, ctx, "serve", "--config", cfg, "--listen", addr, "--data", filepath.Join(dir, "data"), "--log-level", "error")
		served <- err
	}()
	defer func() {
		cancel()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("serve did not stop")
		}
	}()
	tlsArgs := func(l *certstest.Leaf) []string {
		return []string{"--ca-file", ca.File, "--cert-file", l.CertFile, "--key-file", l.KeyFile}
	}
	// Wait for it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := runCLI(t, ctx, append([]string{"status", "--server", addr, "--timeout", "1s"}, tlsArgs(viewer)...)...)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not up: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	examples := "../../deploy/examples/pod-security"
	if _, err := runCLI(t, ctx, append([]string{"push", "--server", addr, examples}, tlsArgs(viewer)...)...); exitCode(err) != exitLoad || !strings.Contains(err.Error(), "PermissionDenied") {
		t.Fatalf("push without the write role: %v", err)
	}
	out, err := runCLI(t, ctx, append([]string{"push", "--server", addr, "-o", "json", examples}, tlsArgs(pusher)...)...)
	if err != nil {
		t.Fatal(err)
	}
	var ack struct {
		Revision uint64
		Digest   string
	}
	if err := json.Unmarshal([]byte(out), &ack); err != nil || ack.Revision != 1 {
		t.Fatalf("push: %s %v", out, err)
	}
	if _, err := runCLI(t, ctx, "status", "--server", addr, "--timeout", "2s"); exitCode(err) != exitLoad {
		t.Fatalf("plaintext status against a TLS server: %v", err)
	}
	if _, err := runCLI(t, ctx, "status", "--server", addr, "--timeout", "2s", "--ca-file", ca.File); exitCode(err) != exitLoad {
		t.Fatalf("status without a client certificate: %v", err)
	}
	file := filepath.Join(dir, "backup.db")
	if _, err := runCLI(t, ctx, append([]string{"backup", "--server", addr, "-o", file}, tlsArgs(viewer)...)...); exitCode(err) != exitLoad {
		t.Fatalf("backup without the replicate role: %v", err)
	}
	out, err = runCLI(t, ctx, append([]string{"backup", "--server", addr, "-o", file, "--format", "json"}, tlsArgs(backup)...)...)
	if err != nil {
		t.Fatal(err)
	}
	var b backupSummary
	if err := json.Unmarshal([]byte(out), &b); err != nil || b.Revision != 1 || b.Digest != ack.Digest {
		t.Fatalf("backup: %s (push said %d %s)", out, ack.Revision, ack.Digest)
	}
	restored := filepath.Join(dir, "restored")
	out, err = runCLI(t, ctx, "restore", "--data", restored, "--format", "json", file)
	if err != nil {
		t.Fatal(err)
	}
	var r backupSummary
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Revision != 1 || r.Digest != ack.Digest {
		t.Fatalf("restore: %s", out)
	}
	// The restored directory serves the same digest.
	addr2 := freePort(t)
	ctx2, cancel2 := context.WithCancel(context.Background())
	served2 := make(chan error, 1)
	go func() {
		_, err := runCLI(t, ctx2, "serve", "--listen", addr2, "--data", restored, "--log-level", "error")
		served2 <- err
	}()
	defer func() {
		cancel2()
		if err := <-served2; err != nil {
			t.Errorf("serve (restored): %v", err)
		}
	}()
	deadline = time.Now().Add(30 * time.Second)
	for {
		out, err = runCLI(t, ctx2, "status", "--server", addr2, "-o", "json", "--timeout", "1s")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restored server not up: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var st struct {
		Revision uint64
		Digest   string
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Revision != 1 || st.Digest != ack.Digest {
		t.Fatalf("restored server: %s", out)
	}
}
