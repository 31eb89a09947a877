package arbiterv1

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/grpc/encoding"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
)

func sampleResponse(n int) *DecideResponse {
	resp := &DecideResponse{Allowed: false, Warnings: []string{"w1", "w2"}, AuditAnnotations: map[string]string{"a": "b", "c": "d"},
		Status: &Status{Code: 400, Message: "denied"}, Revision: 42, Digest: "sha256:abc", DecisionId: "id"}
	for i := range n {
		resp.Results = append(resp.Results, &PolicyResult{Policy: "p" + strings.Repeat("x", i%7), PolicyKind: "ValidatingPolicy",
			Result: "fail", Message: "ünïcødé message", Properties: map[string]string{"process": "admission review", "k": "v"},
			Actions: []string{"Deny", "Warn"}, Exceptions: []string{"ns/e"}, Source: "KyvernoValidatingPolicy", Scored: i%2 == 0,
			Category: "Pod Security Standards", Severity: "medium"})
	}
	return resp
}

// TestCodecsRoundTripWithStandard encodes and decodes with both codecs and
// with the standard one, small and large (pooled) messages, and messages
// of other packages (the fallback).
func TestCodecsRoundTripWithStandard(t *testing.T) {
	std := encoding.GetCodecV2("proto")
	for _, n := range []int{0, 16, 2000} {
		want := sampleResponse(n)
		for name, c := range map[string]encoding.CodecV2{"server": ServerCodec(), "client": ClientCodec()} {
			data, err := c.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			got := &DecideResponse{}
			if err := std.Unmarshal(data, got); err != nil {
				t.Fatalf("%s codec, %d results: standard decoding of its encoding: %v", name, n, err)
			}
			if !proto.Equal(got, want) {
				t.Fatalf("%s codec, %d results: encoding differs", name, n)
			}
			stdData, err := std.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			got = &DecideResponse{}
			if err := c.Unmarshal(stdData, got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, want) {
				t.Fatalf("%s codec, %d results: decoding differs", name, n)
			}
		}
	}
	for _, c := range []encoding.CodecV2{ServerCodec(), ClientCodec()} {
		data, err := c.Marshal(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
		if err != nil {
			t.Fatal(err)
		}
		var h healthpb.HealthCheckResponse
		if err := c.Unmarshal(data, &h); err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("fallback: %v %v", err, h.Status)
		}
	}
}

// TestServerCodecRefusesInvalidUTF8 checks a server still refuses what the
// standard codec refuses: a proto3 string that is not UTF-8.
func TestServerCodecRefusesInvalidUTF8(t *testing.T) {
	// DecideRequest.namespace written by hand: tag (field number << 3 |
	// wire type 2), length, two bytes that are not UTF-8.
	fd := (&DecideRequest{}).ProtoReflect().Descriptor().Fields().ByName("namespace")
	if fd == nil {
		t.Fatal("DecideRequest has no namespace field")
	}
	raw := []byte{byte(fd.Number())<<3 | 2, 2, 0xff, 0xfe}
	err := ServerCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw)}, &DecideRequest{})
	if err == nil {
		t.Fatal("the server codec accepted invalid UTF-8 in a string field")
	}
	if err := ClientCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw)}, &DecideRequest{}); err != nil {
		t.Fatalf("client codec: %v", err)
	}
}

// TestRawMessage receives messages left encoded in a pooled buffer, decodes
// them in place (aliasing the buffer), and reuses the buffer for the next.
func TestRawMessage(t *testing.T) {
	c := ClientCodec()
	var raw RawMessage
	defer raw.Free()
	for _, n := range []int{1, 16, 2000, 3} {
		want := &DecideStreamResponse{Items: []*ItemResult{{Index: uint32(n), Decision: sampleResponse(n), PolicyReportJson: []byte(strings.Repeat("{}", n))}}}
		data, err := c.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Unmarshal(data, &raw); err != nil {
			t.Fatal(err)
		}
		got := &DecideStreamResponse{}
		if err := got.UnmarshalVTUnsafe(raw.Bytes()); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("%d results: decoded in place differs", n)
		}
	}
	// The server codec does not fill raw messages (it validates what callers send).
	data, _ := c.Marshal(sampleResponse(1))
	if err := ServerCodec().Unmarshal(data, &RawMessage{}); err == nil {
		t.Fatal("the server codec accepted a raw message")
	}
}

// TestDirtyPoolBuffersOverwritten pollutes the codecs' pool with garbage
// and checks that what the codecs make with its buffers is exactly the
// standard encoding and decoding: they overwrite every byte they use.
func TestDirtyPoolBuffersOverwritten(t *testing.T) {
	std := encoding.GetCodecV2("proto")
	for _, size := range []int{1 << 12, 1 << 14, 1 << 15, 1 << 20} {
		for range 4 {
			b := make([]byte, size)
			for i := range b {
				b[i] = 0xff
			}
			codecPool.Put(&b)
		}
	}
	if b := codecPool.Get(100); len(*b) != 100 || cap(*b) != 1<<12 {
		t.Fatalf("Get(100): len %d cap %d", len(*b), cap(*b))
	}
	for _, n := range []int{40, 400, 3000} {
		// Without maps, whose order makes the bytes of two encodings differ.
		want := sampleResponse(n)
		want.AuditAnnotations = nil
		for _, r := range want.Results {
			r.Properties = nil
		}
		data, err := ServerCodec().Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		stdData, err := std.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data.Materialize(), stdData.Materialize()) {
			t.Fatalf("%d results: encoded in a used buffer, the bytes differ", n)
		}
		var raw RawMessage
		if err := ClientCodec().Unmarshal(stdData, &raw); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(raw.Bytes(), stdData.Materialize()) {
			t.Fatalf("%d results: materialized in a used buffer, the bytes differ", n)
		}
		raw.Free()
		data.Free()
	}
}

func decideRequestSeeds() []*DecideRequest {
	pod, _ := structpb.NewStruct(map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "p", "namespace": "ns", "labels": map[string]any{"app": "ü"}},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "c", "image": "nginx", "ports": []any{80.0, 1.5, nil, true}}}}})
	return []*DecideRequest{
		{},
		{Object: pod, Operation: Operation_OPERATION_UPDATE, OldObject: pod, Namespace: "ns", Name: "p", DryRun: true},
		{ObjectJson: []byte(`{"apiVersion":"v1","kind":"Pod"}`), Kind: &GroupVersionKind{Version: "v1", Kind: "Pod"},
			UserInfo: &UserInfo{Username: "u", Groups: []string{"g1", "g2"}, Extra: map[string]*StringList{"k": {Values: []string{"v"}}}}},
		{Object: pod, NamespaceObject: pod, Options: pod, MinRevision: 7, Stages: Stages_STAGES_VALIDATE_ONLY},
	}
}

// FuzzServerDecideRequest checks the server's decoding of a DecideRequest
// (vtprotobuf, then the UTF-8 check) against the standard codec: the same
// inputs refused, the same message decoded (unknown fields included), on
// random encodings.
func FuzzServerDecideRequest(f *testing.F) {
	for _, r := range decideRequestSeeds() {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		// The same with a string that is not UTF-8, inside the Struct.
		if i := bytes.Index(b, []byte("ü")); i >= 0 {
			bad := bytes.Clone(b)
			bad[i] = 0xff
			f.Add(bad)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := &DecideRequest{}
		wantErr := proto.Unmarshal(b, want)
		got := &DecideRequest{}
		gotErr := ServerCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("server codec error %v, standard codec error %v", gotErr, wantErr)
		}
		if wantErr != nil {
			return
		}
		if !proto.Equal(reencoded(t, got), want) {
			t.Fatalf("decoded messages differ:\n got %v\nwant %v", got, want)
		}
		// The objects left encoded are the fields' encodings.
		for _, o := range []struct {
			wire []byte
			st   *structpb.Struct
		}{{got.ObjectWire(), want.GetObject()}, {got.OldObjectWire(), want.GetOldObject()}} {
			if o.wire == nil {
				continue
			}
			s := &structpb.Struct{}
			if err := proto.Unmarshal(o.wire, s); err != nil || !proto.Equal(s, o.st) {
				t.Fatalf("object left encoded decodes to %v (%v), want %v", s, err, o.st)
			}
		}
	})
}

// reencoded is m encoded and decoded with the standard codec: its objects
// decoded when the server's codec left them encoded.
func reencoded(t *testing.T, m *DecideRequest) *DecideRequest {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	out := &DecideRequest{}
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestServerDecideRequestLarge: a request larger than maxVTRequestBytes
// goes through the standard codec, which refuses nesting beyond its
// recursion limit.
func TestServerDecideRequestLarge(t *testing.T) {
	s := &structpb.Struct{}
	for range 12000 {
		s = &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewStructValue(s)}}
	}
	b, err := proto.MarshalOptions{}.Marshal(&DecideRequest{Object: s})
	if err != nil {
		t.Fatal(err)
	}
	if len(b) <= maxVTRequestBytes {
		t.Fatalf("only %d bytes", len(b))
	}
	if err := ServerCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &DecideRequest{}); err == nil {
		t.Fatal("a Struct nested 12,000 deep was accepted")
	}
}

// TestObjectWireFieldNumbers checks the field numbers the codec cuts out
// against decision.proto.
func TestObjectWireFieldNumbers(t *testing.T) {
	fds := (&DecideRequest{}).ProtoReflect().Descriptor().Fields()
	for name, num := range map[string]int{"object": int(decideRequestObject), "old_object": int(decideRequestOldObject)} {
		fd := fds.ByName(protoreflect.Name(name))
		if fd == nil || int(fd.Number()) != num || fd.Message().FullName() != "google.protobuf.Struct" {
			t.Fatalf("DecideRequest.%s is not the Struct field %d", name, num)
		}
	}
}

// TestServerCodecLeavesObjectsEncoded: the server's codec leaves object
// and old_object encoded (ObjectWire, OldObjectWire) on its fast path,
// decodes the other fields, and the message re-encodes to the request;
// the standard codec's path (here: an unknown field) decodes them.
func TestServerCodecLeavesObjectsEncoded(t *testing.T) {
	pod, err := structpb.NewStruct(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []*DecideRequest{
		{Object: pod, Namespace: "ns", OldObject: &structpb.Struct{}, Operation: Operation_OPERATION_UPDATE, DryRun: true},
		{Object: pod},
		{OldObject: pod, Name: "p"},
		{Name: "p"},
	} {
		b, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got := &DecideRequest{}
		if err := ServerCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got); err != nil {
			t.Fatal(err)
		}
		if got.GetObject() != nil || got.GetOldObject() != nil {
			t.Fatalf("%v: objects decoded on the fast path", want)
		}
		if (got.ObjectWire() != nil) != (want.Object != nil) || (got.OldObjectWire() != nil) != (want.OldObject != nil) {
			t.Fatalf("%v: object left encoded %q, old object %q", want, got.ObjectWire(), got.OldObjectWire())
		}
		if got.GetName() != want.GetName() || got.GetNamespace() != want.GetNamespace() || got.GetOperation() != want.GetOperation() || got.GetDryRun() != want.GetDryRun() {
			t.Fatalf("other fields: got %v, want %v", got, want)
		}
		if !proto.Equal(reencoded(t, got), want) {
			t.Fatalf("re-encoded %v, want %v", reencoded(t, got), want)
		}
		vt, err := got.MarshalVT()
		if err != nil {
			t.Fatal(err)
		}
		back := &DecideRequest{}
		if err := proto.Unmarshal(vt, back); err != nil || !proto.Equal(back, want) {
			t.Fatalf("re-encoded with vtprotobuf: %v (%v), want %v", back, err, want)
		}
	}
	// An unknown field sends the request to the standard codec: decoded.
	b, _ := proto.Marshal(&DecideRequest{Object: pod})
	b = protowire.AppendTag(b, 999, protowire.VarintType)
	b = protowire.AppendVarint(b, 1)
	got := &DecideRequest{}
	if err := ServerCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got.GetObject(), pod) || got.ObjectWire() != nil {
		t.Fatalf("standard path: object %v, left encoded %q", got.GetObject(), got.ObjectWire())
	}
	// A message built with its object decoded reads as that.
	if (&DecideRequest{Object: pod}).ObjectWire() != nil || (*DecideRequest)(nil).ObjectWire() != nil {
		t.Fatal("ObjectWire of a message not from the codec")
	}
}
