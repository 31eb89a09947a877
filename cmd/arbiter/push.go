package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/arbiter-pdp/arbiter/apply"
	"github.com/arbiter-pdp/arbiter/client"
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

func newPushCommand() *cobra.Command {
	var (
		addr     string
		output   string
		expected uint64
		timeout  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "push --server ADDR PATH...",
		Short: "Make the server's policy objects equal to the manifests under PATH",
		Long: `Make the server's objects equal to the manifests under PATH, in one revision:
every object under PATH is upserted, and every stored object PATH no longer has
is deleted. Policies, exceptions, bindings, Namespaces, GlobalContextEntries
and the PodSecurityConfiguration are policy objects; every other object
(ConfigMaps, Deployments, CRDs, params, ...) is a context object: what policies
read with resource.Get and resource.List (and GlobalContextEntries list),
pinned at the revision like the policies (Secrets only when the server stores them:
serve --store-secrets). The server compiles the result first and refuses the
whole push if any object does not load (exit 2, naming the object and field).
Prints the new revision and digest, or "unchanged" when nothing differs, and
how many context objects the push holds.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if addr == "" {
				return exitWith(exitLoad, "--server is required")
			}
			if len(args) == 0 {
				return exitWith(exitLoad, "no paths given")
			}
			return runPush(cmd.Context(), cmd.OutOrStdout(), addr, args, output, expected, timeout)
		},
	}
	cmd.Flags().StringVar(&addr, "server", "", "address of the primary")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	cmd.Flags().Uint64Var(&expected, "expected-revision", 0, "push only if the server is at this revision (optimistic concurrency)")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "deadline of the push")
	return cmd
}

func runPush(ctx context.Context, out io.Writer, addr string, paths []string, output string, expected uint64, timeout time.Duration) error {
	if ctx == nil {
		ctx = context.Background()
	}
	objs, err := apply.ReadObjects(paths...)
	if err != nil {
		return err
	}
	var payload [][]byte
	var sources []string
	var psaConfig *manifest.Object
	contextObjects := 0
	for _, o := range objs {
		if engine.Classify(o) == engine.ClassResource {
			contextObjects++
		}
		if engine.Classify(o) == engine.ClassPodSecurityConfiguration {
			if psaConfig != nil {
				return exitWith(exitLoad, "%s: %s: kind: a second PodSecurityConfiguration (%s is already in %s): a set holds at most one", o.Source, o.Ref(), psaConfig.Ref(), psaConfig.Source)
			}
			psaConfig = o
		}
		b, err := json.Marshal(o.Content)
		if err != nil {
			return exitWith(exitLoad, "%s: %v", o.Source, err)
		}
		payload = append(payload, b)
		sources = append(sources, o.Source)
	}
	c, err := dialServer(ctx, addr)
	if err != nil {
		return exitWith(exitLoad, "%v", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ack, err := c.Push(ctx, payload, sources, expected)
	if err != nil {
		return exitWith(exitLoad, "push refused: %s", client.Describe(err))
	}
	if output == "json" {
		return json.NewEncoder(out).Encode(map[string]any{
			"revision": ack.GetRevision(), "digest": ack.GetDigest(), "unchanged": ack.GetUnchanged(),
			"upserted": ack.GetUpserted(), "deleted": ack.GetDeleted(), "contextObjects": contextObjects,
		})
	}
	if ack.GetUnchanged() {
		_, err = fmt.Fprintf(out, "unchanged\nrevision: %d\ndigest: %s\ncontext objects: %d\n", ack.GetRevision(), ack.GetDigest(), contextObjects)
		return err
	}
	_, err = fmt.Fprintf(out, "revision: %d\ndigest: %s\nupserted: %d\ndeleted: %d\ncontext objects: %d\n", ack.GetRevision(), ack.GetDigest(), ack.GetUpserted(), ack.GetDeleted(), contextObjects)
	return err
}
