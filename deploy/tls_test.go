package deploy_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/server/authz"
)

// TestMutualTLS: every gRPC connection between the workloads is mutual
// TLS that works as configured — the server's certificate (from the Secret
// mounted where --tls-cert points) names the host the client dials, the
// client presents a certificate for client auth from the same CA, and the
// server's authorization rules (its --config file, from the ConfigMap
// mounted there, read by the server's own authz code) grant that
// certificate's identity the roles it needs and no more:
//
//	follower → primary   cn:arbiter-server   replicate
//	shim → followers     cn:arbiter-webhook  decide (never write or replicate)
//	operator → primary   cn:arbiter-admin    write (arbiter push), replicate (backup)
func TestMutualTLS(t *testing.T) {
	m := loadManifests(t)
	bySecret := map[string]*certManagerObject{}
	for _, c := range m.certManager {
		if c.Kind == "Certificate" {
			bySecret[c.Spec.SecretName] = c
		}
	}
	var primary, follower, shim *workload
	ws := workloads(m)
	for i := range ws {
		c := &ws[i].pod.Spec.Containers[0]
		switch {
		case c.Args[0] == "webhook":
			shim = &ws[i]
		case c.Args[0] == "serve" && arg(c, "--follow") != "":
			follower = &ws[i]
		case c.Args[0] == "serve":
			primary = &ws[i]
		}
	}
	if primary == nil || follower == nil || shim == nil {
		t.Fatalf("want a primary, followers and a shim among %d workloads", len(ws))
	}

	// certificate is the Certificate whose Secret holds the file that flag
	// names (the key file too, from the same Secret).
	certificate := func(w *workload, certFlag, keyFlag string) *certManagerObject {
		t.Helper()
		c := &w.pod.Spec.Containers[0]
		v, key := fileSource(*w, c, arg(c, certFlag))
		kv, kkey := fileSource(*w, c, arg(c, keyFlag))
		if v == nil || v.Secret == nil || key != "tls.crt" || kv != v || kkey != "tls.key" {
			t.Fatalf("%s %s: %s/%s are not tls.crt/tls.key of one mounted Secret", w.kind, w.name, certFlag, keyFlag)
		}
		cert := bySecret[v.Secret.SecretName]
		if cert == nil {
			t.Fatalf("%s %s: no Certificate writes Secret %s (%s)", w.kind, w.name, v.Secret.SecretName, certFlag)
		}
		return cert
	}
	// trusts: the CA file flag names is ca.crt of a Secret that a
	// Certificate from the same issuer as cert writes (cert-manager puts the
	// issuing CA there).
	trusts := func(w *workload, caFlag string, cert *certManagerObject) {
		t.Helper()
		c := &w.pod.Spec.Containers[0]
		v, key := fileSource(*w, c, arg(c, caFlag))
		if v == nil || v.Secret == nil || key != "ca.crt" {
			t.Fatalf("%s %s: %s %q is not ca.crt of a mounted Secret", w.kind, w.name, caFlag, arg(c, caFlag))
		}
		from := bySecret[v.Secret.SecretName]
		if from == nil || from.Spec.IssuerRef == nil || cert.Spec.IssuerRef == nil || from.Spec.IssuerRef.Name != cert.Spec.IssuerRef.Name {
			t.Errorf("%s %s: %s comes from Secret %s, not from the issuer of Certificate %s", w.kind, w.name, caFlag, v.Secret.SecretName, cert.Metadata.Name)
		}
	}
	// authorizer is the server's authorization, from its --config file.
	authorizer := func(w *workload) *authz.Authorizer {
		t.Helper()
		c := &w.pod.Spec.Containers[0]
		v, key := fileSource(*w, c, arg(c, "--config"))
		if v == nil || v.ConfigMap == nil {
			t.Fatalf("%s %s: --config is not in a mounted ConfigMap", w.kind, w.name)
		}
		cm, _ := find(m, "ConfigMap", v.ConfigMap.Name).(*corev1.ConfigMap)
		if cm == nil || cm.Data[key] == "" {
			t.Fatalf("%s %s: ConfigMap %s has no %s", w.kind, w.name, v.ConfigMap.Name, key)
		}
		var file struct {
			Authorization authz.Config `json:"authorization"`
		}
		if err := yaml.Unmarshal([]byte(cm.Data[key]), &file); err != nil {
			t.Fatalf("ConfigMap %s %s: %v", cm.Name, key, err)
		}
		a, err := authz.New(file.Authorization, nil)
		if err != nil {
			t.Fatalf("ConfigMap %s %s: %v", cm.Name, key, err)
		}
		return a
	}
	// roles are what a verified client certificate for cert gets from a.
	roles := func(a *authz.Authorizer, cert *certManagerObject) []authz.Role {
		t.Helper()
		x := &x509.Certificate{Subject: pkix.Name{CommonName: cert.Spec.CommonName}, DNSNames: cert.Spec.DNSNames}
		ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{
			PeerCertificates: []*x509.Certificate{x}, VerifiedChains: [][]*x509.Certificate{{x}},
		}}})
		caller, err := a.Authenticate(ctx)
		if err != nil {
			t.Fatalf("certificate %s: %v", cert.Metadata.Name, err)
		}
		var out []authz.Role
		for _, r := range authz.AllRoles {
			if caller.Has(r) {
				out = append(out, r)
			}
		}
		return out
	}
	// dials: the server's certificate is for server auth and names host;
	// host is a Service that selects the server.
	dials := func(client string, target string, server *workload, cert *certManagerObject) {
		t.Helper()
		hostport := target
		if u, err := url.Parse(target); err == nil && u.Scheme == "dns" {
			hostport = strings.TrimPrefix(u.Path, "/")
		}
		host, _, err := net.SplitHostPort(hostport)
		if err != nil {
			t.Fatalf("%s dials %q: %v", client, target, err)
		}
		if !slices.Contains(cert.Spec.DNSNames, host) || !slices.Contains(cert.Spec.Usages, "server auth") {
			t.Errorf("%s dials %s, but Certificate %s (dnsNames %v, usages %v) is not a server certificate for it",
				client, host, cert.Metadata.Name, cert.Spec.DNSNames, cert.Spec.Usages)
		}
		svcName, ns, _ := strings.Cut(strings.TrimSuffix(host, ".svc"), ".")
		svc, _ := find(m, "Service", svcName).(*corev1.Service)
		if svc == nil || svc.Namespace != ns {
			t.Fatalf("%s dials %s: no Service %s in %s", client, host, svcName, ns)
		}
		if w := serviceFor(t, m, svc); w.name != server.name {
			t.Errorf("%s dials %s, which selects %s %s, not %s", client, host, w.kind, w.name, server.name)
		}
	}
	clientCert := func(who string, cert *certManagerObject) {
		t.Helper()
		if !slices.Contains(cert.Spec.Usages, "client auth") || cert.Spec.CommonName == "" {
			t.Errorf("%s presents Certificate %s, which is not a client certificate with a common name (usages %v)", who, cert.Metadata.Name, cert.Spec.Usages)
		}
	}
	want := func(who string, got []authz.Role, want ...authz.Role) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s has roles %v, want %v", who, got, want)
		}
	}

	primaryCert := certificate(primary, "--tls-cert", "--tls-key")
	followerCert := certificate(follower, "--tls-cert", "--tls-key")
	trusts(primary, "--tls-client-ca", primaryCert)
	trusts(follower, "--tls-client-ca", followerCert)
	primaryAuthz, followerAuthz := authorizer(primary), authorizer(follower)

	// follower → primary: serve's defaults are --follow-cert-file = --tls-cert
	// and --follow-ca-file = --tls-client-ca.
	fc := &follower.pod.Spec.Containers[0]
	followCertFlag, followKeyFlag, followCAFlag := "--tls-cert", "--tls-key", "--tls-client-ca"
	if arg(fc, "--follow-cert-file") != "" {
		followCertFlag, followKeyFlag = "--follow-cert-file", "--follow-key-file"
	}
	if arg(fc, "--follow-ca-file") != "" {
		followCAFlag = "--follow-ca-file"
	}
	fcert := certificate(follower, followCertFlag, followKeyFlag)
	trusts(follower, followCAFlag, primaryCert)
	dials("the followers (--follow)", arg(fc, "--follow"), primary, primaryCert)
	clientCert("a follower", fcert)
	want("a follower at the primary (cn:"+fcert.Spec.CommonName+")", roles(primaryAuthz, fcert), authz.RoleDecide, authz.RoleRead, authz.RoleReplicate)

	// shim → followers.
	sc := &shim.pod.Spec.Containers[0]
	scert := certificate(shim, "--server-cert-file", "--server-key-file")
	trusts(shim, "--server-ca-file", followerCert)
	dials("the shim (--server)", arg(sc, "--server"), follower, followerCert)
	clientCert("the shim", scert)
	want("the shim at the followers (cn:"+scert.Spec.CommonName+")", roles(followerAuthz, scert), authz.RoleDecide, authz.RoleRead)
	want("the shim at the primary (cn:"+scert.Spec.CommonName+")", roles(primaryAuthz, scert), authz.RoleDecide, authz.RoleRead)

	// Operators: write and replicate on the primary, from a certificate no
	// workload mounts.
	admin := bySecret["arbiter-admin-tls"]
	if admin == nil {
		t.Fatal("no Certificate writes Secret arbiter-admin-tls")
	}
	clientCert("an operator", admin)
	want("an operator at the primary (cn:"+admin.Spec.CommonName+")", roles(primaryAuthz, admin), authz.AllRoles...)
	for _, w := range ws {
		for _, v := range w.pod.Spec.Volumes {
			if v.Secret != nil && v.Secret.SecretName == admin.Spec.SecretName {
				t.Errorf("%s %s mounts the operators' Secret %s", w.kind, w.name, admin.Spec.SecretName)
			}
		}
	}
	// A certificate of no rule gets no more than decide and read.
	stranger := &certManagerObject{}
	stranger.Metadata.Name, stranger.Spec.CommonName = "stranger", "someone-else"
	want("any other certificate of the CA", roles(primaryAuthz, stranger), authz.RoleDecide, authz.RoleRead)
}
