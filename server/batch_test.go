package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/arbiter-pdp/arbiter/convert"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/report"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
)

func podRequest(name, ns string, hostNetwork bool) *arbiterv1.DecideRequest {
	b, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{"hostNetwork": hostNetwork, "securityContext": map[string]any{"runAsNonRoot": true, "seccompProfile": map[string]any{"type": "RuntimeDefault"}},
			"containers": []any{map[string]any{"name": "c", "image": "x", "securityContext": map[string]any{
				"allowPrivilegeEscalation": false, "capabilities": map[string]any{"drop": []any{"ALL"}}}}}},
	})
	return &arbiterv1.DecideRequest{ObjectJson: b}
}

func TestDecideBatch(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	commit, err := ts.LoadObjects(ctx, readObjects(t, pssDir))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := ts.c.Decision.DecideBatch(ctx, &arbiterv1.DecideBatchRequest{Items: []*arbiterv1.BatchItem{
		{Name: "good", Request: podRequest("good", "a", false)},
		{Name: "bad json", Request: &arbiterv1.DecideRequest{ObjectJson: []byte("{")}},
		{Name: "host network", Request: podRequest("hn", "a", true)},
		{Name: "missing request"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetRevision() != commit.Revision || resp.GetDigest() != commit.Digest || len(resp.GetItems()) != 4 {
		t.Fatalf("batch: rev %d digest %s items %d", resp.GetRevision(), resp.GetDigest(), len(resp.GetItems()))
	}
	it := resp.GetItems()
	if it[0].GetIndex() != 0 || it[0].GetName() != "good" || !it[0].GetDecision().GetAllowed() || it[0].GetDecision().GetRevision() != 0 {
		t.Fatalf("item 0: %v", it[0])
	}
	if it[1].GetIndex() != 1 || it[1].GetError().GetCode() != int32(codes.InvalidArgument) || it[1].GetError().GetField() != "request.object_json" || it[1].GetDecision() != nil {
		t.Fatalf("item 1: %v", it[1])
	}
	if it[2].GetDecision().GetAllowed() || !strings.Contains(it[2].GetDecision().GetStatus().GetMessage(), "disallow-host-namespaces") {
		t.Fatalf("item 2: %v", it[2])
	}
	if it[3].GetError().GetField() != "request" {
		t.Fatalf("item 3: %v", it[3])
	}
	// policy_reports: the same verdicts, each item's results as its
	// PolicyReport (and counts) instead of decision results.
	items := []*arbiterv1.BatchItem{{Name: "good", Request: podRequest("good", "a", false)},
		{Name: "bad json", Request: &arbiterv1.DecideRequest{ObjectJson: []byte("{")}},
		{Name: "host network", Request: podRequest("hn", "a", true)}}
	withReports, err := ts.c.Decision.DecideBatch(ctx, &arbiterv1.DecideBatchRequest{Items: items, PolicyReports: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, got := range withReports.GetItems() {
		want := it[i]
		if i == 1 {
			if got.GetError().GetField() != "request.object_json" || got.GetPolicyReportJson() != nil {
				t.Fatalf("bad item with reports: %v", got)
			}
			continue
		}
		var rep report.Report
		if err := json.Unmarshal(got.GetPolicyReportJson(), &rep); err != nil {
			t.Fatalf("item %d: report %q: %v", i, got.GetPolicyReportJson(), err)
		}
		wantResults := convert.ReportResults(want.GetDecision().GetResults())
		sum := got.GetReportSummary()
		if len(got.GetDecision().GetResults()) != 0 || got.GetDecision().GetAllowed() != want.GetDecision().GetAllowed() ||
			!reflect.DeepEqual(rep.Results, wantResults) || rep.Kind != "PolicyReport" || rep.Scope.Name != []string{"good", "", "hn"}[i] || rep.Scope.Namespace != "a" ||
			int(sum.GetPass()) != rep.Summary.Pass || int(sum.GetFail()) != rep.Summary.Fail || rep.Summary.Pass+rep.Summary.Fail != 16 {
			t.Fatalf("item %d with reports: %v\nreport %+v\nwant results %+v", i, got, rep, wantResults)
		}
	}
	if s := withReports.GetItems()[2].GetReportSummary(); s.GetFail() == 0 || withReports.GetItems()[2].GetDecision().GetStatus() == nil {
		t.Fatalf("host network item: %v", withReports.GetItems()[2])
	}

	// More than 1,000 items: refused, pointing at DecideStream.
	big := &arbiterv1.DecideBatchRequest{}
	for i := 0; i < server.MaxBatchItems+1; i++ {
		big.Items = append(big.Items, &arbiterv1.BatchItem{Request: podRequest("p", "a", false)})
	}
	_, err = ts.c.Decision.DecideBatch(ctx, big)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "DecideStream") {
		t.Fatalf("oversized batch: %v", err)
	}
}

// A 5,000-manifest stream against a server while a writer commits new
// revisions: every item is decided at the stream's one revision.
func TestDecideStreamPinnedWhileWriting(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	if _, err := ts.LoadObjects(ctx, readObjects(t, pssDir)); err != nil {
		t.Fatal(err)
	}
	// The writer toggles an exception that exempts every pod from
	// disallow-host-namespaces, so each revision flips every verdict.
	exc := func(on bool) *manifest.Object {
		cond := "false"
		if on {
			cond = "true"
		}
		return manifest.NewObject("t", map[string]any{
			"apiVersion": "policies.kyverno.io/v1", "kind": "PolicyException",
			"metadata": map[string]any{"name": "toggle", "namespace": "x"},
			"spec": map[string]any{
				"policyRefs":      []any{map[string]any{"name": "disallow-host-namespaces", "kind": "ValidatingPolicy"}},
				"matchConditions": []any{map[string]any{"name": "t", "expression": cond}},
			},
		})
	}
	if _, err := ts.LoadObjects(ctx, []*manifest.Object{exc(false)}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		on := true
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := ts.LoadObjects(ctx, []*manifest.Object{exc(on)}); err != nil {
				t.Error(err)
				return
			}
			on = !on
			time.Sleep(2 * time.Millisecond)
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	// One item per message, and items in messages of 1 to 37 (answered
	// several at a time), with a bad item now and then.
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			revision := decideStream(t, ts, 5000, batched)
			// The verdict is the one of the stated revision.
			if _, err := ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: podRequest("p", "a", true).GetObjectJson(), MinRevision: revision}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// decideStream streams n host-network pods (every 997th a bad item) and
// checks the answers: in order, named, all at the first message's
// revision, one verdict. It returns the revision.
func decideStream(t *testing.T, ts *testServer, n int, batched bool) uint64 {
	t.Helper()
	stream, err := ts.c.Decision.DecideStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	item := func(i int) *arbiterv1.BatchItem {
		if i%997 == 5 {
			return &arbiterv1.BatchItem{Name: fmt.Sprint(i), Request: &arbiterv1.DecideRequest{ObjectJson: []byte("[")}}
		}
		return &arbiterv1.BatchItem{Name: fmt.Sprint(i), Request: podRequest(fmt.Sprintf("p%d", i), "a", true)}
	}
	go func() {
		for i := 0; i < n; {
			msg := &arbiterv1.DecideStreamRequest{}
			if batched && i > 0 && i%37 == 0 {
				// A later message may still carry a single item (the first
				// decides how the stream is answered).
				msg.Item = item(i)
				i++
			} else if batched {
				for k := 0; k < 1+i%37 && i < n; k++ {
					msg.Items = append(msg.Items, item(i))
					i++
				}
			} else {
				msg.Item = item(i)
				i++
			}
			if err := stream.Send(msg); err != nil {
				return
			}
		}
		stream.CloseSend()
	}()
	var revision uint64
	verdicts := map[bool]int{}
	i, messages := 0, 0
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if messages == 0 {
			if revision = resp.GetRevision(); revision == 0 {
				t.Fatal("first response states no revision")
			}
		} else if resp.GetRevision() != 0 {
			t.Fatalf("message %d restates a revision", messages)
		}
		messages++
		answers := resp.GetItems()
		if batched != (resp.GetItem() == nil) || len(answers) > 0 != batched {
			t.Fatalf("message %d: item %v, items %d (batched %v)", messages, resp.GetItem(), len(answers), batched)
		}
		if !batched {
			answers = []*arbiterv1.ItemResult{resp.GetItem()}
		}
		for _, it := range answers {
			if int(it.GetIndex()) != i || it.GetName() != fmt.Sprint(i) {
				t.Fatalf("answer %d out of order: %d %q", i, it.GetIndex(), it.GetName())
			}
			if i%997 == 5 {
				if it.GetError().GetField() != "request.object_json" || it.GetDecision() != nil {
					t.Fatalf("bad item %d: %v", i, it)
				}
			} else {
				verdicts[it.GetDecision().GetAllowed()]++
			}
			i++
		}
	}
	if i != n {
		t.Fatalf("%d items answered, want %d", i, n)
	}
	if len(verdicts) != 1 {
		t.Fatalf("items decided at different revisions: %v", verdicts)
	}
	if batched && messages >= n/2 {
		t.Errorf("%d answers in %d messages: not batched", n, messages)
	}
	return revision
}

// A message of more than 1,000 items, or with both item and items, ends
// the stream with INVALID_ARGUMENT naming the field.
func TestDecideStreamRefusesBadMessages(t *testing.T) {
	ts := startServer(t, server.Config{})
	oversized := &arbiterv1.DecideStreamRequest{}
	for i := 0; i <= server.MaxBatchItems; i++ {
		oversized.Items = append(oversized.Items, &arbiterv1.BatchItem{Request: podRequest("p", "a", false)})
	}
	both := &arbiterv1.DecideStreamRequest{Item: &arbiterv1.BatchItem{Request: podRequest("p", "a", false)},
		Items: []*arbiterv1.BatchItem{{Request: podRequest("q", "a", false)}}}
	for _, c := range []struct {
		name  string
		msgs  []*arbiterv1.DecideStreamRequest
		field string
	}{
		{"oversized first", []*arbiterv1.DecideStreamRequest{oversized}, "items"},
		{"both later", []*arbiterv1.DecideStreamRequest{{Items: both.Items}, both}, "item"},
	} {
		t.Run(c.name, func(t *testing.T) {
			stream, err := ts.c.Decision.DecideStream(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range c.msgs {
				if err := stream.Send(m); err != nil {
					t.Fatal(err)
				}
			}
			stream.CloseSend()
			for {
				_, err := stream.Recv()
				if err == nil {
					continue
				}
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.field+":") {
					t.Fatalf("got %v, want INVALID_ARGUMENT on %s", err, c.field)
				}
				return
			}
		})
	}
}

// What-if: candidate objects decided beside the live revision, with the
// difference summarized; nothing is committed.
func TestWhatIf(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	commit, err := ts.LoadObjects(ctx, readObjects(t, pssDir))
	if err != nil {
		t.Fatal(err)
	}
	strictLabel, _ := json.Marshal(map[string]any{
		"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
		"metadata": map[string]any{"name": "require-team-label"},
		"spec": map[string]any{
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE"}, "resources": []any{"pods"}}}},
			"validations": []any{map[string]any{"expression": "has(object.metadata.labels) && 'team' in object.metadata.labels", "message": "pods need a team label"}},
		},
	})
	exempt, _ := json.Marshal(map[string]any{
		"apiVersion": "policies.kyverno.io/v1", "kind": "PolicyException",
		"metadata": map[string]any{"name": "hn", "namespace": "x"},
		"spec":     map[string]any{"policyRefs": []any{map[string]any{"name": "disallow-host-namespaces", "kind": "ValidatingPolicy"}}},
	})
	resp, err := ts.c.Decision.DecideBatch(ctx, &arbiterv1.DecideBatchRequest{
		Items: []*arbiterv1.BatchItem{
			{Name: "ok", Request: podRequest("ok", "a", false)},
			{Name: "ok2", Request: podRequest("ok2", "a", false)},
			{Name: "hostnet", Request: podRequest("hn", "a", true)},
		},
		WhatIf: &arbiterv1.WhatIf{ObjectsJson: [][]byte{strictLabel, exempt}},
	})
	if err != nil {
		t.Fatal(err)
	}
	w := resp.GetWhatIf()
	// hostnet: denied by disallow-host-namespaces now; exempted but denied by the label policy then: results changed.
	if w.GetNewlyDenied() != 2 || w.GetNewlyAllowed() != 0 || w.GetResultsChanged() != 1 ||
		w.GetSummary() != "would now deny 2 manifests; would change the results of 1 manifest without changing the verdict" {
		t.Fatalf("what-if summary: %v", w)
	}
	if !resp.GetItems()[0].GetChanged() || resp.GetItems()[0].GetCandidateDecision().GetAllowed() {
		t.Fatalf("item 0: %v", resp.GetItems()[0])
	}
	if cur := ts.Current(); cur.Revision != commit.Revision || len(cur.Set.Policies()) != 16 {
		t.Fatalf("what-if committed something: rev %d, %d policies", cur.Revision, len(cur.Set.Policies()))
	}
	// A candidate that does not compile: refused, naming it.
	_, err = ts.c.Decision.DecideBatch(ctx, &arbiterv1.DecideBatchRequest{
		Items:  []*arbiterv1.BatchItem{{Request: podRequest("ok", "a", false)}},
		WhatIf: &arbiterv1.WhatIf{ObjectsJson: [][]byte{[]byte(`{"apiVersion":"policies.kyverno.io/v1","kind":"ValidatingPolicy","metadata":{"name":"x"},"spec":{"matchConstraints":{"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["pods"]}]},"validations":[{"expression":"("}]}}`)}},
	})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "what_if.objects_json[0]") {
		t.Fatalf("bad candidate: %v", err)
	}
}
