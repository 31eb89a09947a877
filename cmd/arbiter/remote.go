package main

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/arbiter-pdp/arbiter/client"
	"github.com/arbiter-pdp/arbiter/engine"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// remoteEvaluator decides requests on a server, passing the Namespace
// objects found among the inputs as namespace objects.
type remoteEvaluator struct {
	ctx        context.Context
	c          *client.Client
	namespaces map[string]map[string]any
	revision   uint64
}

func newRemoteEvaluator(ctx context.Context, addr string, objs []*engine.Object) (*remoteEvaluator, error) {
	r := &remoteEvaluator{ctx: ctx, namespaces: map[string]map[string]any{}}
	for _, o := range objs {
		switch engine.Classify(o) {
		case engine.ClassNamespace:
			r.namespaces[o.Name] = o.Content
		case engine.ClassPolicy, engine.ClassException, engine.ClassUnsupported:
			return nil, exitWith(exitLoad, "%s: %s: with --server the policies are the server's; this input holds policy objects", o.Source, o.Ref())
		}
	}
	c, err := client.Dial(ctx, addr)
	if err != nil {
		return nil, exitWith(exitLoad, "%v", err)
	}
	r.c = c
	return r, nil
}

func (r *remoteEvaluator) Close() error { return r.c.Close() }

func (r *remoteEvaluator) evaluate(req *engine.Request) (*arbiterv1.DecideResponse, error) {
	pr, err := protoRequest(req)
	if err != nil {
		return nil, err
	}
	if ns, ok := r.namespaces[req.Namespace]; ok {
		if pr.NamespaceObject, err = structpb.NewStruct(ns); err != nil {
			return nil, exitWith(exitLoad, "namespace %s: %v", req.Namespace, err)
		}
	}
	// Every decision of one run is made at least at the revision of the first.
	pr.MinRevision = r.revision
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	resp, err := r.c.Decide(ctx, pr)
	if err != nil {
		return nil, exitWith(exitLoad, "%s", client.Describe(err))
	}
	if resp.GetRevision() > r.revision {
		r.revision = resp.GetRevision()
	}
	return resp, nil
}
