package client

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/arbiter-pdp/arbiter/internal/certs"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// TLSFiles configures TLS to the server from PEM files, re-read when they
// change (certificate rotation without a restart).
type TLSFiles struct {
	// CA verifies the server's certificate (empty: the system roots).
	CA string
	// Cert and Key are the client certificate for mutual TLS (optional).
	Cert, Key string
	// ServerName overrides the name checked in the server's certificate.
	ServerName string
}

// TransportCredentials returns gRPC TLS credentials for f.
func (f TLSFiles) TransportCredentials() (credentials.TransportCredentials, error) {
	r, err := certs.New(certs.Files{CA: f.CA, Cert: f.Cert, Key: f.Key}, certs.Options{})
	if err != nil {
		return nil, fmt.Errorf("TLS: %w", err)
	}
	return credentials.NewTLS(r.ClientConfig(f.ServerName)), nil
}

// WithTLS dials with TLS configured from files.
func WithTLS(f TLSFiles) Option {
	return func(d *dialConfig) {
		c, err := f.TransportCredentials()
		if err != nil {
			d.err = err
			return
		}
		d.creds = c
	}
}

// WithBearerToken sends "authorization: Bearer TOKEN" with every call (TLS only).
func WithBearerToken(token string) Option {
	return func(d *dialConfig) {
		d.dialOpts = append(d.dialOpts, grpc.WithPerRPCCredentials(staticToken(token)))
	}
}

// WithTokenFile sends the bearer token read from path with every call (TLS
// only); the file is re-read when it changes.
func WithTokenFile(path string) Option {
	return func(d *dialConfig) {
		c, err := TokenFileCredentials(path)
		if err != nil {
			d.err = err
			return
		}
		d.dialOpts = append(d.dialOpts, grpc.WithPerRPCCredentials(c))
	}
}

type staticToken string

func (t staticToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

func (staticToken) RequireTransportSecurity() bool { return true }

// TokenFileCredentials returns per-call credentials carrying the bearer
// token in path (its first line), re-read when the file changes.
func TokenFileCredentials(path string) (credentials.PerRPCCredentials, error) {
	t := &tokenFile{path: path}
	if _, err := t.token(); err != nil {
		return nil, err
	}
	return t, nil
}

type tokenFile struct {
	path string
	mu   sync.Mutex
	mod  time.Time
	tok  string
}

func (t *tokenFile) token() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fi, err := os.Stat(t.path)
	if err != nil {
		if t.tok != "" {
			return t.tok, nil
		}
		return "", fmt.Errorf("token file: %w", err)
	}
	if t.tok != "" && fi.ModTime().Equal(t.mod) {
		return t.tok, nil
	}
	b, err := os.ReadFile(t.path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", t.path)
	}
	t.tok, t.mod = tok, fi.ModTime()
	return tok, nil
}

func (t *tokenFile) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	tok, err := t.token()
	if err != nil {
		return nil, err
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

func (*tokenFile) RequireTransportSecurity() bool { return true }

// BackupInfo describes a backup.
type BackupInfo struct {
	Revision uint64
	Digest   string
	Bytes    int64
}

// Backup writes a consistent copy of the server's store file to w.
func (c *Client) Backup(ctx context.Context, w io.Writer) (BackupInfo, error) {
	var info BackupInfo
	stream, err := c.Admin.Backup(ctx, &arbiterv1.BackupRequest{})
	if err != nil {
		return info, err
	}
	first := true
	var size uint64
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return info, err
		}
		if first {
			info.Revision, info.Digest, size = m.GetRevision(), m.GetDigest(), m.GetSize()
			first = false
		}
		n, err := w.Write(m.GetData())
		info.Bytes += int64(n)
		if err != nil {
			return info, err
		}
	}
	if first {
		return info, fmt.Errorf("backup: the server sent nothing")
	}
	if uint64(info.Bytes) != size {
		return info, fmt.Errorf("backup: received %d bytes of %d", info.Bytes, size)
	}
	return info, nil
}
