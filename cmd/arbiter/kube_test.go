package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-pdp/arbiter/kubesource"
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
		{"--kube-webhooks alone", []string{"--kube-webhooks", "managed"}, "apply to --kube-source"},
		{"an unknown webhook mode", []string{"--kube-source", "--kubeconfig", kubeconfig, "--kube-webhooks", "auto"}, `want static or managed`},
		{"webhook flags with static webhooks", []string{"--kube-source", "--kubeconfig", kubeconfig, "--kube-webhook-url", "https://x"}, "apply to --kube-webhooks managed"},
		{"a plain-HTTP webhook URL", []string{"--kube-source", "--kubeconfig", kubeconfig, "--kube-webhooks", "managed", "--kube-webhook-url", "http://127.0.0.1:8443"}, "--kube-webhook-url"},
		{"URL and Service", []string{"--kube-source", "--kubeconfig", kubeconfig, "--kube-webhooks", "managed", "--kube-webhook-url", "https://x", "--kube-webhook-service", "a/b"}, "contradict"},
		{"a Service without namespace", []string{"--kube-source", "--kubeconfig", kubeconfig, "--kube-webhooks", "managed", "--kube-webhook-service", "arbiter-webhook"}, "NAMESPACE/NAME[:PORT]"},
		{"a Service with a bad port", []string{"--kube-source", "--kubeconfig", kubeconfig, "--kube-webhooks", "managed", "--kube-webhook-service", "a/b:https"}, "NAMESPACE/NAME[:PORT]"},
		{"a bad namespace selector", []string{"--kube-source", "--kubeconfig", kubeconfig, "--kube-webhooks", "managed", "--kube-webhook-namespace-selector", "a in (b"}, "--kube-webhook-namespace-selector"},
		{"an annotation without value", []string{"--kube-source", "--kubeconfig", kubeconfig, "--kube-webhooks", "managed", "--kube-webhook-annotation", "x"}, "KEY=VALUE"},
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

func TestParseServiceRef(t *testing.T) {
	for in, want := range map[string]kubesource.ServiceRef{
		"arbiter/arbiter-webhook":      {Namespace: "arbiter", Name: "arbiter-webhook", Port: 443},
		"arbiter/arbiter-webhook:8443": {Namespace: "arbiter", Name: "arbiter-webhook", Port: 8443},
	} {
		if got, err := parseServiceRef(in); err != nil || got != want {
			t.Errorf("parseServiceRef(%q) = %+v, %v", in, got, err)
		}
	}
}

// The managed webhook configuration the flags make.
func TestKubeClusterConfig(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "arbiter")
	k := kubeOptions{policyStatus: true, reportsUser: "system:serviceaccount:arbiter:reports", webhooks: "managed",
		webhookName: kubesource.DefaultWebhookConfigName, webhookNSSelector: "team=a", webhookAnnotation: []string{"cert-manager.io/inject-ca-from=arbiter/arbiter-webhook"}}
	var src kubesource.Config
	if err := k.clusterConfig(&src); err != nil {
		t.Fatal(err)
	}
	if src.Status == nil || src.Status.ReportsUser != k.reportsUser {
		t.Fatalf("status %+v", src.Status)
	}
	w := src.Webhooks
	if w == nil || w.Service != (kubesource.ServiceRef{Namespace: "arbiter", Name: "arbiter-webhook", Port: 443}) || w.URL != "" {
		t.Fatalf("webhooks %+v", w)
	}
	sel := w.NamespaceSelector
	if sel.MatchLabels["team"] != "a" || len(sel.MatchExpressions) != 2 || sel.MatchExpressions[1].Values[0] != "arbiter" {
		t.Fatalf("namespace selector %+v", sel)
	}
	if w.Annotations["cert-manager.io/inject-ca-from"] != "arbiter/arbiter-webhook" {
		t.Fatalf("annotations %v", w.Annotations)
	}
	k = kubeOptions{webhooks: "static", webhookName: kubesource.DefaultWebhookConfigName}
	src = kubesource.Config{}
	if err := k.clusterConfig(&src); err != nil || src.Status != nil || src.Webhooks != nil {
		t.Fatalf("static, no status: %+v %v", src, err)
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
