package main

import (
	"log/slog"

	"github.com/arbiter-pdp/arbiter/server"
	"github.com/arbiter-pdp/arbiter/server/authz"
)

// authzSection is the authorization section of a config file.
type authzSection = authz.Config

// security is what serve's TLS, authentication and authorization flags
// amount to (server.NewSecurity).
type security struct {
	*server.Security
	authz *authz.Authorizer // Security.Authz
}

// isLoopback says whether addr (host:port) names a loopback address.
var isLoopback = server.IsLoopback

// securityConfig is serve's security flags.
func securityConfig(o *serveOptions) server.SecurityConfig {
	return server.SecurityConfig{
		Listen: o.listen, GatewayListen: o.gatewayListen, Insecure: o.insecure,
		TLSCert: o.tlsCert, TLSKey: o.tlsKey, TLSClientCA: o.tlsClientCA, TLSClientAuth: o.tlsClientAuth, TLSReload: o.tlsReload,
		AuthTokenFile: o.authTokenFile, Authorization: o.authorization,
		Follow: o.follow, FollowCA: o.followCA, FollowCert: o.followCert, FollowKey: o.followKey,
		FollowServerName: o.followServerName, FollowTokenFile: o.followTokenFile,
	}
}

func securityFromOptions(o *serveOptions, log *slog.Logger) (*security, error) {
	sec, err := server.NewSecurity(securityConfig(o), log)
	if err != nil {
		return nil, exitWith(exitLoad, "%v", err)
	}
	return &security{Security: sec, authz: sec.Authz}, nil
}
