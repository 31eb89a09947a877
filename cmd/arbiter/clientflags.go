package main

import (
	"context"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/arbiter-pdp/arbiter/client"
)

// connFlags are how commands that talk to a server (--server) connect:
// TLS files and a bearer token. Each has an ARBITER_* environment default.
type connFlags struct {
	tls        bool
	caFile     string
	certFile   string
	keyFile    string
	tokenFile  string
	serverName string
}

type connKey struct{}

// addConnFlags adds the connection flags to the root command (they apply
// to every command that takes --server); the command's context carries
// them to dialServer.
func addConnFlags(root *cobra.Command) {
	connOpts := &connFlags{}
	prev := root.PersistentPreRunE
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		cmd.SetContext(context.WithValue(ctx, connKey{}, connOpts))
		if prev != nil {
			return prev(cmd, args)
		}
		return nil
	}
	f := root.PersistentFlags()
	f.BoolVar(&connOpts.tls, "tls", os.Getenv("ARBITER_TLS") == "true", "with --server: use TLS, verifying the server with the system roots unless --ca-file is given [ARBITER_TLS]")
	f.StringVar(&connOpts.caFile, "ca-file", os.Getenv("ARBITER_CA_FILE"), "with --server: CA bundle verifying the server's certificate; implies --tls [ARBITER_CA_FILE]")
	f.StringVar(&connOpts.certFile, "cert-file", os.Getenv("ARBITER_CERT_FILE"), "with --server: client certificate (mutual TLS); implies --tls [ARBITER_CERT_FILE]")
	f.StringVar(&connOpts.keyFile, "key-file", os.Getenv("ARBITER_KEY_FILE"), "with --server: key of --cert-file [ARBITER_KEY_FILE]")
	f.StringVar(&connOpts.tokenFile, "token-file", os.Getenv("ARBITER_TOKEN_FILE"), "with --server: file holding a bearer token sent with each call (TLS only) [ARBITER_TOKEN_FILE]")
	f.StringVar(&connOpts.serverName, "server-name", os.Getenv("ARBITER_SERVER_NAME"), "with --server: name expected in the server's certificate (default: the host of --server) [ARBITER_SERVER_NAME]")
}

// options returns the client options the flags describe.
func (c *connFlags) options() []client.Option {
	var opts []client.Option
	if c.tls || c.caFile != "" || c.certFile != "" || c.keyFile != "" || c.serverName != "" {
		opts = append(opts, client.WithTLS(client.TLSFiles{CA: c.caFile, Cert: c.certFile, Key: c.keyFile, ServerName: c.serverName}))
	}
	if c.tokenFile != "" {
		opts = append(opts, client.WithTokenFile(c.tokenFile))
	}
	return opts
}

// dialServer connects to the server at addr with the connection flags
// carried by ctx (or, outside a command, the ARBITER_* environment).
func dialServer(ctx context.Context, addr string, extra ...client.Option) (*client.Client, error) {
	return client.Dial(ctx, addr, append(connOptions(ctx), extra...)...)
}

// connOptions are the client options of the connection flags carried by
// ctx (or, outside a command, the ARBITER_* environment).
func connOptions(ctx context.Context) []client.Option {
	cf, _ := ctx.Value(connKey{}).(*connFlags)
	if cf == nil {
		cf = envConnFlags()
	}
	return cf.options()
}

// envConnFlags are the connection flags' ARBITER_* environment defaults.
func envConnFlags() *connFlags {
	return &connFlags{tls: os.Getenv("ARBITER_TLS") == "true", caFile: os.Getenv("ARBITER_CA_FILE"), certFile: os.Getenv("ARBITER_CERT_FILE"),
		keyFile: os.Getenv("ARBITER_KEY_FILE"), tokenFile: os.Getenv("ARBITER_TOKEN_FILE"), serverName: os.Getenv("ARBITER_SERVER_NAME")}
}

// version is the module version the binary was built from.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "devel"
}
