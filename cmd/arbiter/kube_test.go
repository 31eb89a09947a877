package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The --kube-source flags are checked before the server takes calls; none
// of these cases reaches an API server.
func TestKubeSourceFlags(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("POD_IP", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // not in a cluster
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"--kubeconfig alone", []string{"--kubeconfig", kubeconfig}, "apply to --kube-source"},
		{"--advertise-address alone", []string{"--advertise-address", "10.0.0.1:50051"}, "apply to --kube-source"},
		{"with --follow", []string{"--kube-source", "--kubeconfig", kubeconfig, "--follow", "127.0.0.1:1"}, "--kube-source and --follow contradict"},
		{"with --load", []string{"--kube-source", "--kubeconfig", kubeconfig, "--load", "../../deploy/examples/pod-security"}, "--load and --kube-source contradict"},
		{"no kubeconfig outside a cluster", []string{"--kube-source"}, "--kube-source:"},
		{"unreadable kubeconfig", []string{"--kube-source", "--kubeconfig", filepath.Join(dir, "missing")}, "--kube-source:"},
		{"every address, nothing to advertise", []string{"--kube-source", "--kubeconfig", kubeconfig, "--listen", "0.0.0.0:0", "--insecure"}, "give --advertise-address"},
		{"plaintext to a non-loopback replica", []string{"--kube-source", "--kubeconfig", kubeconfig, "--advertise-address", "10.0.0.1:50051"}, "plaintext"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			args := append([]string{"serve", "--data", t.TempDir(), "--listen", freePort(t), "--log-level", "error"}, tt.args...)
			_, err := runCLI(t, ctx, args...)
			if exitCode(err) != exitLoad || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("serve %v: %v, want exit 2 with %q", tt.args, err, tt.want)
			}
		})
	}
}

func TestAdvertiseAddress(t *testing.T) {
	tests := []struct {
		flag, listen, podIP, want string
	}{
		{"", "127.0.0.1:50051", "", "127.0.0.1:50051"},
		{"", "0.0.0.0:50051", "10.1.2.3", "10.1.2.3:50051"},
		{"", "[::]:50051", "fd00::7", "[fd00::7]:50051"},
		{"", ":50051", "10.1.2.3", "10.1.2.3:50051"},
		{"arbiter-0.arbiter:50051", "0.0.0.0:50051", "10.1.2.3", "arbiter-0.arbiter:50051"},
	}
	for _, tt := range tests {
		t.Setenv("POD_IP", tt.podIP)
		got, err := advertiseAddress(tt.flag, tt.listen)
		if err != nil || got != tt.want {
			t.Errorf("advertiseAddress(%q, %q) with POD_IP=%q = %q, %v; want %q", tt.flag, tt.listen, tt.podIP, got, err, tt.want)
		}
	}
}
