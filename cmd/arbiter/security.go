package main

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/arbiter-pdp/arbiter/client"
	"github.com/arbiter-pdp/arbiter/internal/certs"
	"github.com/arbiter-pdp/arbiter/server/authz"
)

// authzSection is the authorization section of a config file.
type authzSection = authz.Config

// security is what serve's TLS, authentication and authorization flags
// amount to.
type security struct {
	authz             *authz.Authorizer
	creds             credentials.TransportCredentials
	tlsConfig         *tls.Config
	followDialOptions []grpc.DialOption
	clientAuth        string
	summary           string
}

// isLoopback says whether addr (host:port) names a loopback address.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func securityFromOptions(o *serveOptions, log *slog.Logger) (*security, error) {
	sec := &security{clientAuth: "none"}
	tlsOn := o.tlsCert != "" || o.tlsKey != ""
	switch {
	case tlsOn && o.insecure:
		return nil, exitWith(exitLoad, "--insecure and --tls-cert contradict each other: drop one")
	case !tlsOn && (o.tlsClientCA != "" || o.tlsClientAuth != ""):
		return nil, exitWith(exitLoad, "--tls-client-ca and --tls-client-auth need --tls-cert and --tls-key")
	case !tlsOn && !isLoopback(o.listen) && !o.insecure:
		return nil, exitWith(exitLoad, "refusing to serve plaintext gRPC on %s, which is not a loopback address: give --tls-cert and --tls-key (and --tls-client-ca for mutual TLS), or --insecure for development", o.listen)
	case !tlsOn && o.gatewayListen != "" && !isLoopback(o.gatewayListen) && !o.insecure:
		return nil, exitWith(exitLoad, "refusing to serve the plaintext JSON gateway on %s, which is not a loopback address: give --tls-cert and --tls-key, or --insecure for development", o.gatewayListen)
	}
	reload := certs.Options{Interval: o.tlsReload, Logger: log}
	if tlsOn {
		r, err := certs.New(certs.Files{Cert: o.tlsCert, Key: o.tlsKey, CA: o.tlsClientCA}, reload)
		if err != nil {
			return nil, exitWith(exitLoad, "TLS: %v", err)
		}
		auth := tls.NoClientCert
		if o.tlsClientCA != "" {
			mode := o.tlsClientAuth
			if mode == "" {
				mode = "require"
				if o.authTokenFile != "" {
					mode = "optional"
				}
			}
			switch mode {
			case "require":
				auth = tls.RequireAndVerifyClientCert
			case "optional":
				auth = tls.VerifyClientCertIfGiven
			default:
				return nil, exitWith(exitLoad, "--tls-client-auth: %q is not require or optional", mode)
			}
			sec.clientAuth = mode
		}
		cfg, err := r.ServerConfig(auth)
		if err != nil {
			return nil, exitWith(exitLoad, "TLS: %v", err)
		}
		sec.creds = credentials.NewTLS(cfg)
		sec.tlsConfig = cfg
	} else {
		log.Warn("INSECURE: serving plaintext gRPC: traffic is neither encrypted nor authenticated; use --tls-cert/--tls-key (and --tls-client-ca) outside development",
			"listen", o.listen)
	}

	// Authorization.
	ac := authz.Config{}
	if o.authorization != nil {
		ac = *o.authorization
	}
	if o.authTokenFile != "" {
		ac.TokenFile = o.authTokenFile
	}
	switch {
	case o.authorization == nil && !tlsOn && ac.TokenFile == "":
		ac.Disabled = true
		sec.summary = "off (plaintext without an authorization section: every caller has every role)"
		log.Warn("INSECURE: authorization is off: every caller may decide, read, write and replicate")
	case o.authorization == nil && o.tlsClientCA == "" && ac.TokenFile == "":
		// TLS without any way to identify callers.
		ac.Anonymous = authz.DefaultAuthenticated
		sec.summary = "no caller identities (no --tls-client-ca, no --auth-token-file): every caller may decide and read; writes and replication are refused"
		log.Warn("authorization: " + sec.summary)
	default:
		sec.summary = fmt.Sprintf("%d rules", len(ac.Rules))
	}
	a, err := authz.New(ac, log)
	if err != nil {
		return nil, exitWith(exitLoad, "authorization: %v", err)
	}
	sec.authz = a

	// The follower's connection to its primary.
	if o.follow != "" {
		followTLS := tlsOn || o.followCA != "" || o.followCert != ""
		if followTLS {
			files := certs.Files{CA: first(o.followCA, o.tlsClientCA), Cert: first(o.followCert, o.tlsCert), Key: first(o.followKey, o.tlsKey)}
			r, err := certs.New(files, reload)
			if err != nil {
				return nil, exitWith(exitLoad, "follower TLS: %v", err)
			}
			sec.followDialOptions = append(sec.followDialOptions, grpc.WithTransportCredentials(credentials.NewTLS(r.ClientConfig(o.followServerName))))
		} else if !isLoopback(o.follow) && !o.insecure {
			return nil, exitWith(exitLoad, "refusing to follow %s over plaintext: it is not a loopback address; give --follow-ca-file (and --follow-cert-file/--follow-key-file), serve with TLS, or --insecure", o.follow)
		}
		if o.followTokenFile != "" {
			if !followTLS {
				return nil, exitWith(exitLoad, "--follow-token-file needs TLS to the primary (bearer tokens are never sent in plaintext)")
			}
			c, err := client.TokenFileCredentials(o.followTokenFile)
			if err != nil {
				return nil, exitWith(exitLoad, "--follow-token-file: %v", err)
			}
			sec.followDialOptions = append(sec.followDialOptions, grpc.WithPerRPCCredentials(c))
		}
	}
	return sec, nil
}

func first(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
