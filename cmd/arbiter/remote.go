package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"runtime"
	"sync"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/arbiter-pdp/arbiter/client"
	"github.com/arbiter-pdp/arbiter/engine"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// decideRemote decides every request on the server in one DecideStream, so
// the whole run is pinned to one revision. Namespace objects among the
// inputs are sent as the namespace objects of requests in them; policy
// objects are refused (the policies are the server's), except as
// candidates.
func decideRemote(ctx context.Context, addr string, in *inputs, reqs []*engine.Request, candidates []*engine.Object, prog *progress, format string) ([]outcome, *arbiterv1.WhatIfSummary, error) {
	namespaces := map[string]*structpb.Struct{}
	for _, o := range in.objects {
		switch engine.Classify(o) {
		case engine.ClassNamespace:
			st, err := structpb.NewStruct(o.Content)
			if err != nil {
				return nil, nil, exitWith(exitLoad, "%s: %s: %v", o.Source, o.Ref(), err)
			}
			namespaces[o.Name] = st
		case engine.ClassPolicy, engine.ClassException, engine.ClassUnsupported, engine.ClassVAP, engine.ClassVAPBinding, engine.ClassPodSecurityConfiguration:
			return nil, nil, exitWith(exitLoad, "%s: %s: with --server the policies are the server's (try it with --candidate)", o.Source, o.Ref())
		}
	}
	var whatIf *arbiterv1.WhatIf
	if len(candidates) > 0 {
		whatIf = &arbiterv1.WhatIf{}
		for _, o := range candidates {
			if engine.Classify(o) == engine.ClassResource {
				return nil, nil, exitWith(exitLoad, "%s: %s: a candidate must be a policy object", o.Source, o.Ref())
			}
			b, err := json.Marshal(o.Content)
			if err != nil {
				return nil, nil, exitWith(exitLoad, "%s: %v", o.Source, err)
			}
			whatIf.ObjectsJson = append(whatIf.ObjectsJson, b)
		}
	}
	c, err := dialServer(ctx, addr)
	if err != nil {
		return nil, nil, exitWith(exitLoad, "%v", err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Decision.DecideStream(ctx)
	if err != nil {
		return nil, nil, exitWith(exitLoad, "%s", client.Describe(err))
	}
	sendErr := make(chan error, 1)
	go func() {
		defer close(sendErr)
		for i, req := range reqs {
			pr, err := protoRequest(req)
			if err != nil {
				sendErr <- err
				return
			}
			pr.NamespaceObject = namespaces[req.Namespace]
			msg := &arbiterv1.DecideStreamRequest{Item: &arbiterv1.BatchItem{Name: in.resources[i].Ref(), Request: pr}}
			if i == 0 {
				msg.WhatIf = whatIf
			}
			if err := stream.Send(msg); err != nil {
				if errors.Is(err, io.EOF) {
					return // the server ended the stream; Recv has its status
				}
				sendErr <- err
				return
			}
		}
		if err := stream.CloseSend(); err != nil {
			sendErr <- err
		}
	}()
	outcomes := make([]outcome, len(reqs))
	// Each outcome's report is made by a worker as soon as it arrives,
	// while the stream goes on.
	finished := make(chan int, 256)
	var finishing sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		finishing.Add(1)
		go func() {
			defer finishing.Done()
			for i := range finished {
				outcomes[i].finish(format)
			}
		}()
	}
	defer func() {
		close(finished)
		finishing.Wait()
	}()
	var summary *arbiterv1.WhatIfSummary
	received := 0
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, exitWith(exitLoad, "deciding on %s: %s", addr, client.Describe(err))
		}
		if resp.GetWhatIf() != nil {
			summary = resp.GetWhatIf()
			continue
		}
		it := resp.GetItem()
		i := int(it.GetIndex())
		if i < 0 || i >= len(reqs) || outcomes[i].decision != nil {
			return nil, nil, exitWith(exitLoad, "deciding on %s: unexpected item index %d", addr, i)
		}
		if e := it.GetError(); e != nil {
			return nil, nil, exitWith(exitLoad, "%s: %s", in.resources[i].Ref(), e.GetMessage())
		}
		outcomes[i] = outcome{resource: in.resources[i], namespace: reqs[i].Namespace, decision: it.GetDecision(),
			candidate: it.GetCandidateDecision(), changed: it.GetChanged()}
		finished <- i
		received++
		prog.add(1)
	}
	if err := <-sendErr; err != nil {
		return nil, nil, exitWith(exitLoad, "sending to %s: %v", addr, err)
	}
	if received != len(reqs) {
		return nil, nil, exitWith(exitLoad, "deciding on %s: %d of %d answered", addr, received, len(reqs))
	}
	if whatIf != nil && summary == nil {
		return nil, nil, exitWith(exitLoad, "deciding on %s: no what-if summary", addr)
	}
	return outcomes, summary, nil
}

// parallelDo runs fn(0..n-1) on GOMAXPROCS goroutines.
func parallelDo(n int, fn func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			fn(i)
		}
		return
	}
	var wg sync.WaitGroup
	next := make(chan int, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fn(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}
