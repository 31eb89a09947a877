package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/arbiter-pdp/arbiter/client"
	"github.com/arbiter-pdp/arbiter/internal/certs"
	"github.com/arbiter-pdp/arbiter/server/authz"
)

// SecurityConfig is how a replica secures its listeners and identifies its
// callers, and how it reaches a primary it follows: `arbiter serve`'s TLS,
// authentication and authorization flags, whose names its errors use.
type SecurityConfig struct {
	// Listen and GatewayListen are the gRPC and JSON gateway addresses:
	// plaintext is refused on any but a loopback address unless Insecure.
	Listen, GatewayListen string
	Insecure              bool
	// TLSCert and TLSKey turn TLS on; TLSClientCA verifies client
	// certificates, asked for as TLSClientAuth says (require or optional;
	// default require, optional with AuthTokenFile). The files are re-read
	// every TLSReload when they change.
	TLSCert, TLSKey, TLSClientCA string
	TLSClientAuth                string
	TLSReload                    time.Duration
	// AuthTokenFile holds the bearer tokens accepted (TOKEN,NAME lines).
	AuthTokenFile string
	// Authorization is the authorization section of the config file (nil:
	// none).
	Authorization *authz.Config
	// Follow is the primary's address (empty: a primary). The Follow*
	// files secure the connection to it (defaults: the server's own).
	Follow                            string
	FollowCA, FollowCert, FollowKey   string
	FollowServerName, FollowTokenFile string
}

// Security is what a SecurityConfig amounts to.
type Security struct {
	Authz *authz.Authorizer
	// Credentials and TLSConfig secure the listeners (nil: plaintext).
	Credentials credentials.TransportCredentials
	TLSConfig   *tls.Config
	// FollowDialOptions reach the primary of Follow.
	FollowDialOptions []grpc.DialOption
	// ClientCertificates (none, require or optional) and Authorization
	// describe the configuration for the logs.
	ClientCertificates string
	Authorization      string
}

// NewSecurity checks c and builds its credentials, authorizer and the
// follower's dial options, warning on log about what is insecure.
func NewSecurity(c SecurityConfig, log *slog.Logger) (*Security, error) {
	sec := &Security{ClientCertificates: "none"}
	tlsOn := c.tlsOn()
	switch {
	case tlsOn && c.Insecure:
		return nil, errors.New("--insecure and --tls-cert contradict each other: drop one")
	case !tlsOn && (c.TLSClientCA != "" || c.TLSClientAuth != ""):
		return nil, errors.New("--tls-client-ca and --tls-client-auth need --tls-cert and --tls-key")
	case !tlsOn && !IsLoopback(c.Listen) && !c.Insecure:
		return nil, fmt.Errorf("refusing to serve plaintext gRPC on %s, which is not a loopback address: give --tls-cert and --tls-key (and --tls-client-ca for mutual TLS), or --insecure for development", c.Listen)
	case !tlsOn && c.GatewayListen != "" && !IsLoopback(c.GatewayListen) && !c.Insecure:
		return nil, fmt.Errorf("refusing to serve the plaintext JSON gateway on %s, which is not a loopback address: give --tls-cert and --tls-key, or --insecure for development", c.GatewayListen)
	}
	if tlsOn {
		r, err := certs.New(certs.Files{Cert: c.TLSCert, Key: c.TLSKey, CA: c.TLSClientCA}, c.reload(log))
		if err != nil {
			return nil, fmt.Errorf("TLS: %v", err)
		}
		auth := tls.NoClientCert
		if c.TLSClientCA != "" {
			mode := c.TLSClientAuth
			if mode == "" {
				mode = "require"
				if c.AuthTokenFile != "" {
					mode = "optional"
				}
			}
			switch mode {
			case "require":
				auth = tls.RequireAndVerifyClientCert
			case "optional":
				auth = tls.VerifyClientCertIfGiven
			default:
				return nil, fmt.Errorf("--tls-client-auth: %q is not require or optional", mode)
			}
			sec.ClientCertificates = mode
		}
		cfg, err := r.ServerConfig(auth)
		if err != nil {
			return nil, fmt.Errorf("TLS: %v", err)
		}
		sec.Credentials = credentials.NewTLS(cfg)
		sec.TLSConfig = cfg
	} else {
		log.Warn("INSECURE: serving plaintext gRPC: traffic is neither encrypted nor authenticated; use --tls-cert/--tls-key (and --tls-client-ca) outside development",
			"listen", c.Listen)
	}

	// Authorization.
	ac := authz.Config{}
	if c.Authorization != nil {
		ac = *c.Authorization
	}
	if c.AuthTokenFile != "" {
		ac.TokenFile = c.AuthTokenFile
	}
	switch {
	case c.Authorization == nil && !tlsOn && ac.TokenFile == "":
		ac.Disabled = true
		sec.Authorization = "off (plaintext without an authorization section: every caller has every role)"
		log.Warn("INSECURE: authorization is off: every caller may decide, read, write and replicate")
	case c.Authorization == nil && c.TLSClientCA == "" && ac.TokenFile == "":
		// TLS without any way to identify callers.
		ac.Anonymous = authz.DefaultAuthenticated
		sec.Authorization = "no caller identities (no --tls-client-ca, no --auth-token-file): every caller may decide and read; writes and replication are refused"
		log.Warn("authorization: " + sec.Authorization)
	default:
		sec.Authorization = fmt.Sprintf("%d rules", len(ac.Rules))
	}
	a, err := authz.New(ac, log)
	if err != nil {
		return nil, fmt.Errorf("authorization: %v", err)
	}
	sec.Authz = a

	if c.Follow != "" {
		opts, err := c.FollowDialOptions(c.Follow, log)
		var pe *PlaintextFollowError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("refusing to follow %s over plaintext: it is not a loopback address; give --follow-ca-file (and --follow-cert-file/--follow-key-file), serve with TLS, or --insecure", pe.Target)
		}
		if err != nil {
			return nil, err
		}
		sec.FollowDialOptions = opts
	}
	return sec, nil
}

// PlaintextFollowError refuses to follow a primary that is not on a
// loopback address over plaintext.
type PlaintextFollowError struct{ Target string }

func (e *PlaintextFollowError) Error() string {
	return "refusing to follow " + e.Target + " over plaintext: it is not a loopback address"
}

// FollowDialOptions are how a follower reaches a primary at target: over
// TLS when the server has TLS or FollowCA or FollowCert is given (the
// Follow* files, defaulting to the server's own), with FollowTokenFile's
// bearer token; over plaintext only to a loopback address unless Insecure
// (else a *PlaintextFollowError).
func (c SecurityConfig) FollowDialOptions(target string, log *slog.Logger) ([]grpc.DialOption, error) {
	var opts []grpc.DialOption
	followTLS := c.tlsOn() || c.FollowCA != "" || c.FollowCert != ""
	if followTLS {
		files := certs.Files{CA: first(c.FollowCA, c.TLSClientCA), Cert: first(c.FollowCert, c.TLSCert), Key: first(c.FollowKey, c.TLSKey)}
		r, err := certs.New(files, c.reload(log))
		if err != nil {
			return nil, fmt.Errorf("follower TLS: %v", err)
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(r.ClientConfig(c.FollowServerName))))
	} else if !IsLoopback(target) && !c.Insecure {
		return nil, &PlaintextFollowError{Target: target}
	}
	if c.FollowTokenFile != "" {
		if !followTLS {
			return nil, errors.New("--follow-token-file needs TLS to the primary (bearer tokens are never sent in plaintext)")
		}
		tc, err := client.TokenFileCredentials(c.FollowTokenFile)
		if err != nil {
			return nil, fmt.Errorf("--follow-token-file: %v", err)
		}
		opts = append(opts, grpc.WithPerRPCCredentials(tc))
	}
	return opts, nil
}

func (c SecurityConfig) tlsOn() bool { return c.TLSCert != "" || c.TLSKey != "" }

func (c SecurityConfig) reload(log *slog.Logger) certs.Options {
	return certs.Options{Interval: c.TLSReload, Logger: log}
}

// IsLoopback says whether addr (host:port) names a loopback address.
func IsLoopback(addr string) bool {
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

func first(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
