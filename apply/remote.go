package apply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"

	"github.com/arbiter-pdp/arbiter/client"
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/internal/parallel"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// decideRemote decides every resource on the server in one DecideStream,
// so the whole run is pinned to one revision. Namespace objects among the
// inputs are sent as the namespace objects of requests in them.
func decideRemote(ctx context.Context, addr string, opts []client.Option, in *remoteInputs, candidates []*manifest.Object, prog *progress, fin *finisher) ([]outcome, *arbiterv1.WhatIfSummary, error) {
	var whatIf *arbiterv1.WhatIf
	if len(candidates) > 0 {
		whatIf = &arbiterv1.WhatIf{}
		for _, o := range candidates {
			if engine.Classify(o) == engine.ClassResource {
				return nil, nil, fmt.Errorf("%s: %s: a candidate must be a policy object", o.Source, o.Ref())
			}
			b, err := json.Marshal(o.Content)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %v", o.Source, err)
			}
			whatIf.ObjectsJson = append(whatIf.ObjectsJson, b)
		}
	}
	c, err := client.Dial(ctx, addr, opts...)
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Decision.DecideStream(ctx)
	if err != nil {
		return nil, nil, errors.New(client.Describe(err))
	}
	// What is kept of each resource is its identity: the sender drops the
	// requests (the bulk of the inputs) once they are sent.
	n := len(in.resources)
	outcomes := make([]outcome, n)
	refs := make([]string, n)
	for i, res := range in.resources {
		outcomes[i] = newOutcome(res.object, res.request.GetNamespace())
		refs[i] = res.object.Ref()
		if fin.format == "json" || fin.format == "yaml" {
			// The resource as it would be admitted is the server's patch
			// applied to it (-o json: the server sends it, unless it
			// predates admitted_objects).
			outcomes[i].object = res.request.GetObjectJson()
		}
	}
	sendErr := make(chan error, 1)
	go func() {
		defer close(sendErr)
		// Items go in messages of streamBatch (fewer, larger messages cost
		// less per item); the answers come the same way.
		for start := 0; start < n; start += streamBatch {
			msg := &arbiterv1.DecideStreamRequest{}
			for i := start; i < min(start+streamBatch, n); i++ {
				pr := in.resources[i].request
				in.resources[i].request = nil
				pr.NamespaceObject = in.namespaces[pr.GetNamespace()]
				msg.Items = append(msg.Items, &arbiterv1.BatchItem{Name: refs[i], Request: pr})
			}
			if start == 0 {
				msg.WhatIf = whatIf
				// -o json: the server makes the reports (cheaper than
				// sending every result to make them here), and sends the
				// mutated resources (cheaper than decoding them here again
				// to apply a patch).
				msg.PolicyReports = fin.json != nil
				msg.AdmittedObjects = fin.json != nil
				if fin.json != nil {
					// Indented as elements of the output's array.
					msg.JsonPrefix = elementPrefix
				}
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
	// Each outcome's report is made by a worker as soon as it arrives,
	// while the stream goes on.
	finishing := parallel.NewPool(256, func(i int) { fin.finish(i, &outcomes[i]) })
	defer finishing.Close()
	var summary *arbiterv1.WhatIfSummary
	received := 0
	seen := make([]bool, n)
	// With the server's reports, each answer is decoded in place, its
	// report written, and the message's buffer reused: nothing of it is
	// kept. Otherwise answers are decoded into their own memory (the
	// workers finish them later).
	var raw arbiterv1.RawMessage
	defer raw.Free()
	for {
		err := stream.RecvMsg(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("deciding on %s: %s", addr, client.Describe(err))
		}
		resp := &arbiterv1.DecideStreamResponse{}
		if fin.json != nil {
			err = resp.UnmarshalVTUnsafe(raw.Bytes())
		} else {
			err = resp.UnmarshalVT(raw.Bytes())
		}
		if err != nil {
			return nil, nil, fmt.Errorf("deciding on %s: %v", addr, err)
		}
		if resp.GetWhatIf() != nil {
			summary = proto.CloneOf(resp.GetWhatIf())
			continue
		}
		answers := resp.GetItems()
		if it := resp.GetItem(); it != nil {
			answers = append(answers, it)
		}
		for _, it := range answers {
			i := int(it.GetIndex())
			if i < 0 || i >= n || seen[i] {
				return nil, nil, fmt.Errorf("deciding on %s: unexpected item index %d", addr, i)
			}
			seen[i] = true
			if e := it.GetError(); e != nil {
				return nil, nil, fmt.Errorf("%s: %s: %s", in.resources[i].object.Source, refs[i], e.GetMessage())
			}
			outcomes[i].decision, outcomes[i].candidate, outcomes[i].changed = it.GetDecision(), it.GetCandidateDecision(), it.GetChanged()
			received++
			prog.add(1)
			if js := it.GetPolicyReportJson(); js != nil && fin.json != nil {
				fin.finishReport(i, &outcomes[i], js, it.GetAdmittedObjectJson(), it.GetReportSummary())
				continue
			}
			if fin.json != nil {
				// Decoded in place, but without a report (a server that
				// does not make them): the workers get a copy.
				outcomes[i].decision = proto.CloneOf(it.GetDecision())
			}
			finishing.Put(i)
		}
	}
	if err := <-sendErr; err != nil {
		return nil, nil, fmt.Errorf("sending to %s: %v", addr, err)
	}
	if received != n {
		return nil, nil, fmt.Errorf("deciding on %s: %d of %d answered", addr, received, n)
	}
	if whatIf != nil && summary == nil {
		return nil, nil, fmt.Errorf("deciding on %s: no what-if summary", addr)
	}
	return outcomes, summary, nil
}

// streamBatch is how many items apply --server sends per DecideStream
// message.
const streamBatch = 64
