package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/arbiter-pdp/arbiter/clusterdata"
	"github.com/arbiter-pdp/arbiter/convert"
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
	"github.com/arbiter-pdp/arbiter/internal/jsonenc"
	"github.com/arbiter-pdp/arbiter/internal/parallel"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/store"
	"github.com/arbiter-pdp/arbiter/whatif"
)

// MaxBatchItems bounds a DecideBatch.
const MaxBatchItems = 1000

// DecideBatch implements DecisionService.DecideBatch.
func (s *Server) DecideBatch(ctx context.Context, in *arbiterv1.DecideBatchRequest) (*arbiterv1.DecideBatchResponse, error) {
	if n := len(in.GetItems()); n > MaxBatchItems {
		return nil, toStatus(&FieldError{Field: "items", Detail: fmt.Sprintf("%d items: a batch holds at most %d (use DecideStream for more)", n, MaxBatchItems)})
	}
	snap, err := s.snapshotFor(ctx, in.GetMinRevision())
	if err != nil {
		return nil, toStatus(err)
	}
	cand, err := s.candidateSet(snap, in.GetWhatIf())
	if err != nil {
		return nil, toStatus(err)
	}
	with, err := answerWithOf(in.GetPolicyReports(), in.GetAdmittedObjects(), in.GetJsonPrefix())
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &arbiterv1.DecideBatchResponse{Revision: snap.Revision, Digest: snap.Digest, Items: make([]*arbiterv1.ItemResult, len(in.GetItems()))}
	parallel.For(len(in.GetItems()), func(i int) {
		resp.Items[i] = s.decideItem(ctx, snap, cand, with, uint32(i), in.GetItems()[i])
	})
	if cand != nil {
		resp.WhatIf = whatif.Summarize(resp.Items)
	}
	return resp, nil
}

// reportBuffers recycles the buffers of policy_report_json, once their
// response is sent.
var reportBuffers = sync.Pool{New: func() any {
	// Room for a report of 16 results without growing.
	b := make([]byte, 0, 16<<10)
	return &b
}}

// recycleReport returns the buffer of a sent item's admitted object and
// report to reportBuffers (the report follows the admitted object in it).
func recycleReport(it *arbiterv1.ItemResult) {
	b := it.GetAdmittedObjectJson()
	if b == nil {
		b = it.GetPolicyReportJson()
	}
	it.AdmittedObjectJson, it.PolicyReportJson = nil, nil
	if b != nil {
		b = b[:0]
		reportBuffers.Put(&b)
	}
}

// resultBuffers recycles the results of batch and stream decisions.
var resultBuffers = sync.Pool{New: func() any {
	var r []outcome.Result
	return &r
}}

// recycleResults returns a decision's results to resultBuffers, cleared
// (what they point to is not kept alive).
func recycleResults(d *engine.Decision) {
	r := d.Results
	d.Results = nil
	if cap(r) == 0 || cap(r) > 1024 {
		return
	}
	r = r[:0]
	clear(r[:cap(r)])
	resultBuffers.Put(&r)
}

// answerWith is what a batch or stream asks its items to be answered with
// besides their decisions.
type answerWith struct {
	// reports: each item's PolicyReport (the decision without results).
	reports bool
	// admitted: a mutated item's object as it would be admitted (the
	// decision without a patch).
	admitted bool
	// prefix starts each line but the first of the report's and the
	// admitted object's JSON.
	prefix string
}

// maxJSONPrefix bounds json_prefix.
const maxJSONPrefix = 16

// answerWithOf reads a batch's or stream's answer fields.
func answerWithOf(reports, admitted bool, prefix string) (answerWith, error) {
	if len(prefix) > maxJSONPrefix || strings.Trim(prefix, " \t") != "" {
		return answerWith{}, &FieldError{Field: "json_prefix", Detail: fmt.Sprintf("%q: at most %d spaces or tabs", prefix, maxJSONPrefix)}
	}
	return answerWith{reports: reports, admitted: admitted, prefix: prefix}, nil
}

// decideItem decides one item against the snapshot (and the candidate set),
// answering with what with asks for.
func (s *Server) decideItem(ctx context.Context, snap *Snapshot, cand *candidate, with answerWith, index uint32, item *arbiterv1.BatchItem) *arbiterv1.ItemResult {
	out := &arbiterv1.ItemResult{Index: index, Name: item.GetName()}
	if item.GetRequest() == nil {
		out.Error = &arbiterv1.ItemError{Code: int32(codes.InvalidArgument), Message: "request: required", Field: "request"}
		return out
	}
	start := time.Now()
	req, opts, err := convert.RequestFromProto(item.GetRequest())
	if err == nil {
		err = s.cfg.Limits.ObjectSizes(item.GetRequest())
	}
	if err != nil {
		st := status.Convert(toStatus(err))
		out.Error = &arbiterv1.ItemError{Code: int32(st.Code()), Message: st.Message()}
		var fe *FieldError
		if errors.As(err, &fe) {
			out.Error.Field = "request." + fe.Field
		}
		return out
	}
	opts.CostBudget = s.cfg.Limits.MaxDecisionCost
	opts.Now = start // one clock reading for the item
	var reads *clusterdata.Reads
	opts.Context, reads = snap.RecordedContext()
	opts.ImageVerifier = s.cfg.ImageVerifier
	// The results go in a recycled slice: nothing keeps them past this
	// function (the answer, the report and the decision log copy them).
	opts.Results = *resultBuffers.Get().(*[]outcome.Result)
	ctx, calls := s.collectCalls(ctx)
	d := snap.Set.Evaluate(ctx, req, opts)
	defer recycleResults(d)
	// One buffer holds the admitted object, then the report.
	var buf []byte
	if with.reports || with.admitted && d.Mutated != nil {
		buf = (*reportBuffers.Get().(*[]byte))[:0]
	}
	if with.admitted && d.Mutated != nil {
		// Encoded from the engine's own object: JSON-shaped, it always
		// encodes. The slice keeps the buffer's capacity (recycleReport
		// returns the buffer through it).
		if js, err := jsonenc.AppendIndent(buf, d.Mutated, with.prefix, "  "); err == nil {
			out.AdmittedObjectJson, buf = js, js[len(js):]
		}
	}
	verdict := convert.VerdictFromDecision
	if out.AdmittedObjectJson != nil {
		verdict = convert.VerdictWithoutPatch
	}
	out.Decision = verdict(d)
	if !with.reports || cand != nil {
		// Without a report, the decision carries the results.
		convert.WithResults(out.Decision, d)
	}
	out.Decision.DecisionId = newDecisionIDAt(start)
	s.observeDecision(ctx, snap, req, d, out.Decision, start, reads, calls)
	if cand != nil {
		cr := *req
		copts := *opts
		c := *cand.libs
		copts.Context = &c
		copts.Results = nil
		out.CandidateDecision = convert.ResponseFromDecision(cand.set.Evaluate(ctx, &cr, &copts))
		out.Changed = whatif.Changed(out.Decision, out.CandidateDecision)
	}
	if with.reports {
		rep := reportOf(req, d)
		out.PolicyReportJson = rep.AppendJSONCached(buf, with.prefix, &snap.reports)
		out.ReportSummary = &arbiterv1.ReportSummary{Pass: uint32(rep.Summary.Pass), Fail: uint32(rep.Summary.Fail),
			Warn: uint32(rep.Summary.Warn), Error: uint32(rep.Summary.Error), Skip: uint32(rep.Summary.Skip)}
		out.Decision.Results = nil
	}
	return out
}

// candidate is the what-if content: its policy set, and the context its
// decisions read (the snapshot's context objects with the candidate's).
type candidate struct {
	set  *engine.PolicySet
	libs *clusterdata.Context
}

// candidateSet compiles the snapshot's objects with the what-if candidate
// objects applied; nil without what-if. Nothing is committed.
func (s *Server) candidateSet(snap *Snapshot, w *arbiterv1.WhatIf) (*candidate, error) {
	if w == nil || len(w.GetObjectsJson()) == 0 && len(w.GetDeletes()) == 0 {
		return nil, nil
	}
	var changes []store.Change
	sources := map[store.Key]string{}
	for i, raw := range w.GetObjectsJson() {
		content, err := manifest.DecodeJSON(raw)
		if err != nil {
			return nil, &FieldError{Field: fmt.Sprintf("what_if.objects_json[%d]", i), Detail: err.Error()}
		}
		o := manifest.NewObject(fmt.Sprintf("what_if.objects_json[%d]", i), content)
		if err := storable(o); err != nil {
			return nil, err
		}
		v, err := encodeObject(o)
		if err != nil {
			return nil, err
		}
		changes = append(changes, store.Change{Op: store.OpUpsert, Key: KeyOf(o), Value: v})
		sources[KeyOf(o)] = o.Source
	}
	for _, k := range w.GetDeletes() {
		changes = append(changes, store.Change{Op: store.OpDelete, Key: keyFromProto(k)})
	}
	c, err := s.build(contentOf(snap), dedupeChanges(changes), sources)
	if err != nil {
		return nil, err
	}
	return &candidate{set: c.set, libs: s.contextOf(c)}, nil
}

// dedupeChanges keeps the last change of each key.
func dedupeChanges(changes []store.Change) []store.Change {
	last := map[store.Key]int{}
	for i, c := range changes {
		last[c.Key] = i
	}
	out := make([]store.Change, 0, len(last))
	for i, c := range changes {
		if last[c.Key] == i {
			out = append(out, c)
		}
	}
	return out
}

// maxStreamAnswers is how many answers a DecideStreamResponse gathers
// before it is sent (one more chunk may take it past).
const maxStreamAnswers = 64

// streamChunk is how many items of a message a worker decides at once.
const streamChunk = 16

// streamWindow is how many stream items may be in flight (decoded, being
// decided, or decided and not sent yet) ahead of the one being sent: enough
// to keep every worker busy, and few enough that a stream of thousands of
// manifests holds little memory (it was 256 chunks of up to 16 items; a
// 10,000-manifest stream took the server's peak RSS to ~0.5 GB).
const streamWindow = 256

// DecideStream implements DecisionService.DecideStream. Items are decided
// in parallel and answered in order, all against one snapshot.
func (s *Server) DecideStream(stream arbiterv1.DecisionService_DecideStreamServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err != nil {
		return err
	}
	snap, err := s.snapshotFor(ctx, first.GetMinRevision())
	if err != nil {
		return toStatus(err)
	}
	cand, err := s.candidateSet(snap, first.GetWhatIf())
	if err != nil {
		return toStatus(err)
	}
	with, err := answerWithOf(first.GetPolicyReports(), first.GetAdmittedObjects(), first.GetJsonPrefix())
	if err != nil {
		return toStatus(err)
	}
	// Items go to the workers in chunks of up to streamChunk (of one
	// message), each answered at once: fewer hand-offs between goroutines.
	type slot struct {
		done chan []*arbiterv1.ItemResult
	}
	type job struct {
		index uint32 // of the first item
		items []*arbiterv1.BatchItem
		done  chan<- []*arbiterv1.ItemResult
	}
	slots := make(chan slot, streamWindow)
	// window holds a token per item in flight: the reader takes a chunk's
	// before it queues the chunk, the sender gives them back once the
	// chunk's answers are sent.
	window := semaphore.NewWeighted(streamWindow)
	// A fixed pool of workers decides the items: long-lived goroutines keep
	// the stacks CEL evaluation grows (a goroutine per item grew and copied
	// its stack for every item).
	jobs := parallel.NewPool(streamWindow, func(j job) {
		out := make([]*arbiterv1.ItemResult, len(j.items))
		for k, item := range j.items {
			if item == nil {
				item = &arbiterv1.BatchItem{}
			}
			out[k] = s.decideItem(ctx, snap, cand, with, j.index+uint32(k), item)
		}
		j.done <- out
	})
	recvErr := make(chan error, 1)
	batched := len(first.GetItems()) > 0
	// Reader: receives items, queues their evaluation, queues their slots in order.
	go func() {
		defer close(slots)
		defer jobs.Close()
		msg := first
		var index uint32
		for {
			items := msg.GetItems()
			switch {
			case len(items) > MaxBatchItems:
				recvErr <- toStatus(&FieldError{Field: "items", Detail: fmt.Sprintf("%d items in one message: at most %d", len(items), MaxBatchItems)})
				return
			case len(items) > 0 && msg.GetItem() != nil:
				recvErr <- toStatus(&FieldError{Field: "item", Detail: "a message carries item or items, not both"})
				return
			case len(items) == 0 && (msg.GetItem() != nil || !batched):
				// One item (without one, an item that gets its own error).
				items = []*arbiterv1.BatchItem{msg.GetItem()}
			}
			for len(items) > 0 {
				chunk := items[:min(len(items), streamChunk)]
				items = items[len(chunk):]
				if err := window.Acquire(ctx, int64(len(chunk))); err != nil {
					recvErr <- ctx.Err()
					return
				}
				sl := slot{done: make(chan []*arbiterv1.ItemResult, 1)}
				select {
				case slots <- sl:
				case <-ctx.Done():
					recvErr <- ctx.Err()
					return
				}
				jobs.Put(job{index: index, items: chunk, done: sl.done})
				index += uint32(len(chunk))
			}
			var err error
			msg, err = stream.Recv()
			if errors.Is(err, io.EOF) {
				recvErr <- nil
				return
			}
			if err != nil {
				recvErr <- err
				return
			}
		}
	}()
	sentHeader := false
	var items []*arbiterv1.ItemResult
	// held is a slot taken from slots whose chunk was not decided yet when
	// a message of answers was sent.
	var held *slot
	next := func(wait bool) ([]*arbiterv1.ItemResult, bool) {
		if held == nil {
			if wait {
				sl, ok := <-slots
				if !ok {
					return nil, false
				}
				held = &sl
			} else {
				select {
				case sl, ok := <-slots:
					if !ok {
						return nil, false
					}
					held = &sl
				default:
					return nil, false
				}
			}
		}
		if wait {
			chunk := <-held.done
			held = nil
			return chunk, true
		}
		select {
		case chunk := <-held.done:
			held = nil
			return chunk, true
		default:
			return nil, false
		}
	}
	send := func(resp *arbiterv1.DecideStreamResponse) error {
		if !sentHeader {
			resp.Revision, resp.Digest = snap.Revision, snap.Digest
			sentHeader = true
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
		if resp.Item != nil {
			window.Release(1)
		}
		window.Release(int64(len(resp.Items)))
		for _, it := range append(resp.Items, resp.Item) {
			if it == nil {
				continue
			}
			// Send has encoded the message: its report buffer can go round again.
			recycleReport(it)
			if cand != nil {
				items = append(items, &arbiterv1.ItemResult{Decision: it.GetDecision(), CandidateDecision: it.GetCandidateDecision(), Changed: it.GetChanged()})
			}
		}
		return nil
	}
	for {
		chunk, ok := next(true)
		if !ok {
			break
		}
		if !batched {
			// One item per message, as the caller sends them.
			for _, it := range chunk {
				if err := send(&arbiterv1.DecideStreamResponse{Item: it}); err != nil {
					return err
				}
			}
			continue
		}
		// As many answers as are ready, in order.
		resp := &arbiterv1.DecideStreamResponse{Items: chunk}
		for len(resp.Items) < maxStreamAnswers {
			more, ok := next(false)
			if !ok {
				break
			}
			resp.Items = append(resp.Items, more...)
		}
		if err := send(resp); err != nil {
			return err
		}
	}
	if err := <-recvErr; err != nil {
		return err
	}
	if cand != nil {
		return stream.Send(&arbiterv1.DecideStreamResponse{WhatIf: whatif.Summarize(items)})
	}
	return nil
}
