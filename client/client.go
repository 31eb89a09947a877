// Package client is the Go client of Arbiter's gRPC API. It depends only on
// the generated API (and gRPC): it never links the engine.
package client

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// Client is a connection to an Arbiter server.
type Client struct {
	conn     *grpc.ClientConn
	Decision arbiterv1.DecisionServiceClient
	Sync     arbiterv1.SyncServiceClient
	Query    arbiterv1.QueryServiceClient
	Health   healthpb.HealthClient
	Admin    arbiterv1.AdminServiceClient
}

// Option configures Dial.
type Option func(*dialConfig)

type dialConfig struct {
	creds    credentials.TransportCredentials
	dialOpts []grpc.DialOption
	// err is an option that could not be applied (Dial returns it).
	err error
}

// WithTransportCredentials sets TLS (or other) transport credentials. The
// default is plaintext.
func WithTransportCredentials(c credentials.TransportCredentials) Option {
	return func(d *dialConfig) { d.creds = c }
}

// WithDialOptions adds raw gRPC dial options.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(d *dialConfig) { d.dialOpts = append(d.dialOpts, opts...) }
}

// Dial connects to the server at addr (host:port). The connection is made
// lazily; ctx only bounds the setup.
func Dial(_ context.Context, addr string, opts ...Option) (*Client, error) {
	cfg := dialConfig{creds: insecure.NewCredentials()}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	dialOpts := append([]grpc.DialOption{grpc.WithTransportCredentials(cfg.creds),
		// Answers from an Arbiter server decode without reflection.
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(arbiterv1.ClientCodec()))}, cfg.dialOpts...)
	conn, err := grpc.NewClient(addr, dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", addr, err)
	}
	return New(conn), nil
}

// New wraps an existing connection.
func New(conn *grpc.ClientConn) *Client {
	return &Client{
		conn:     conn,
		Decision: arbiterv1.NewDecisionServiceClient(conn),
		Sync:     arbiterv1.NewSyncServiceClient(conn),
		Query:    arbiterv1.NewQueryServiceClient(conn),
		Health:   healthpb.NewHealthClient(conn),
		Admin:    arbiterv1.NewAdminServiceClient(conn),
	}
}

// Conn returns the underlying connection.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Decide asks for one decision.
func (c *Client) Decide(ctx context.Context, req *arbiterv1.DecideRequest, opts ...grpc.CallOption) (*arbiterv1.DecideResponse, error) {
	return c.Decision.Decide(ctx, req, opts...)
}

// Serving reports whether the server's overall health is SERVING.
func (c *Client) Serving(ctx context.Context) (bool, error) {
	resp, err := c.Health.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return false, err
	}
	return resp.GetStatus() == healthpb.HealthCheckResponse_SERVING, nil
}

// WaitServing polls health until SERVING or ctx ends.
func (c *Client) WaitServing(ctx context.Context) error {
	for {
		ok, err := c.Serving(ctx)
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("server not serving: %w", err)
			}
			return fmt.Errorf("server not serving: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Describe renders a gRPC error for people: code, message and details.
func Describe(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	msg := fmt.Sprintf("%s: %s", st.Code(), st.Message())
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *arbiterv1.RevisionInfo:
			msg += fmt.Sprintf(" (server revision %d, digest %s)", d.GetRevision(), d.GetDigest())
		case fmt.Stringer:
			msg += " (" + d.String() + ")"
		}
	}
	return msg
}

// Write sends one write batch on a new Sync stream and returns its
// acknowledgement. A refused batch returns the server's status error
// (INVALID_ARGUMENT with field violations, ABORTED on a revision conflict,
// FAILED_PRECONDITION from a follower).
func (c *Client) Write(ctx context.Context, batch *arbiterv1.WriteBatch) (*arbiterv1.WriteAck, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Sync.Sync(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&arbiterv1.SyncRequest{Kind: &arbiterv1.SyncRequest_Write{Write: batch}}); err != nil {
		// The server's status, if it ended the stream, comes from Recv.
		if _, rerr := stream.Recv(); rerr != nil {
			return nil, rerr
		}
		return nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	_ = stream.CloseSend()
	ack := resp.GetWriteAck()
	if ack == nil {
		return nil, fmt.Errorf("unexpected reply to a write: %T", resp.GetKind())
	}
	return ack, nil
}

// Push makes the server's objects equal to objs (each an object as JSON):
// upserts them and deletes every stored object not among them, in one
// revision. sources, when given, name where each object comes from (e.g.
// a file), so a refusal names it.
func (c *Client) Push(ctx context.Context, objs [][]byte, sources []string, expectedRevision uint64) (*arbiterv1.WriteAck, error) {
	b := &arbiterv1.WriteBatch{ReplaceAll: true, ExpectedRevision: expectedRevision}
	for i, o := range objs {
		ch := &arbiterv1.Change{Op: arbiterv1.ChangeOp_CHANGE_OP_UPSERT, ObjectJson: o}
		if i < len(sources) {
			ch.Source = sources[i]
		}
		b.Changes = append(b.Changes, ch)
	}
	return c.Write(ctx, b)
}

// Status asks for the replica's status.
func (c *Client) Status(ctx context.Context) (*arbiterv1.StatusResponse, error) {
	return c.Query.Status(ctx, &arbiterv1.StatusRequest{})
}
