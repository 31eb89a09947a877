package main

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/arbiter-pdp/arbiter/client"
	"github.com/arbiter-pdp/arbiter/internal/textout"
)

func newStatusCommand() *cobra.Command {
	var (
		addr    string
		output  string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status --server ADDR",
		Short: "Show a replica's revision, digest, role and (on a primary) its followers' lag",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if addr == "" {
				return exitWith(exitLoad, "--server is required")
			}
			return runStatus(cmd.Context(), cmd.OutOrStdout(), addr, output, timeout)
		},
	}
	cmd.Flags().StringVar(&addr, "server", "", "address of the replica")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "deadline of the call")
	return cmd
}

func runStatus(ctx context.Context, out io.Writer, addr, output string, timeout time.Duration) error {
	if ctx == nil {
		ctx = context.Background()
	}
	c, err := dialServer(ctx, addr)
	if err != nil {
		return exitWith(exitLoad, "%v", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		return exitWith(exitLoad, "%s", client.Describe(err))
	}
	role := strings.ToLower(strings.TrimPrefix(st.GetRole().String(), "ROLE_"))
	if output == "json" {
		followers := []map[string]any{}
		for _, f := range st.GetFollowers() {
			followers = append(followers, map[string]any{
				"replicaId": f.GetReplicaId(), "address": f.GetAddress(), "ackedRevision": f.GetAckedRevision(),
				"ackedDigest": f.GetAckedDigest(), "lagRevisions": f.GetLagRevisions(), "lagSeconds": f.GetLagSeconds(),
				"connected": f.GetConnected(),
			})
		}
		return json.NewEncoder(out).Encode(map[string]any{
			"revision": st.GetRevision(), "digest": st.GetDigest(), "role": role, "primary": st.GetPrimary(),
			"serving": st.GetServing(), "objects": st.GetObjects(), "contextObjects": st.GetContextObjects(), "policies": st.GetPolicies(),
			"exceptions": st.GetExceptions(), "oldestRevision": st.GetOldestRevision(),
			"followers": followers, "warnings": st.GetWarnings(),
		})
	}
	text := textout.New(out)
	text.Printf("revision:   %d\ndigest:     %s\nrole:       %s\n", st.GetRevision(), st.GetDigest(), role)
	if st.GetPrimary() != "" {
		text.Printf("primary:    %s\n", st.GetPrimary())
	}
	text.Printf("serving:    %v\nobjects:    %d (%d policies, %d exceptions, %d context objects)\n", st.GetServing(), st.GetObjects(), st.GetPolicies(), st.GetExceptions(), st.GetContextObjects())
	for _, w := range st.GetWarnings() {
		text.Printf("warning:    %s\n", w)
	}
	if len(st.GetFollowers()) > 0 {
		text.Println()
		tw := textout.New(tabwriter.NewWriter(text, 0, 4, 2, ' ', 0))
		tw.Println("FOLLOWER\tCONNECTED\tACKED\tLAG\tLAG SECONDS")
		for _, f := range st.GetFollowers() {
			tw.Printf("%s\t%v\t%d\t%d\t%.1f\n", f.GetReplicaId(), f.GetConnected(), f.GetAckedRevision(), f.GetLagRevisions(), f.GetLagSeconds())
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return text.Err()
}
