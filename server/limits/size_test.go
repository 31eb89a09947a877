package limits

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

func structSizeSeeds() []*structpb.Struct {
	num := structpb.NewNumberValue
	pod, _ := structpb.NewStruct(map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "p", "labels": map[string]any{"app": "ü"}},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "c", "ports": []any{80.0, 1.5, nil, true}}}}})
	return []*structpb.Struct{
		pod, {}, nil,
		{Fields: map[string]*structpb.Value{"nan": num(math.NaN()), "": {}, "nil": nil,
			"nil struct": structpb.NewStructValue(nil), "nil list": structpb.NewListValue(nil),
			"list": structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{nil, {}, num(0)}})}},
	}
}

// TestStructSize checks StructSize against proto.Size on hand-made Structs
// (nil Values among them).
func TestStructSize(t *testing.T) {
	for _, s := range structSizeSeeds() {
		if got, want := StructSize(s), proto.Size(s); got != want {
			t.Fatalf("StructSize %d, proto.Size %d", got, want)
		}
	}
}

// FuzzStructSize checks StructSize and WireStructSize against proto.Size
// on Structs decoded from random encodings (unknown fields among them),
// and that MaxWireStructSize bounds it.
func FuzzStructSize(f *testing.F) {
	for _, s := range structSizeSeeds() {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, b := range wireStructSeeds() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := &structpb.Struct{}
		if proto.Unmarshal(b, s) != nil {
			return
		}
		want := proto.Size(s)
		if got := StructSize(s); got != want {
			t.Fatalf("StructSize %d, proto.Size %d", got, want)
		}
		if got := WireStructSize(b); got != want {
			t.Fatalf("WireStructSize %d, proto.Size %d", got, want)
		}
		if bound := MaxWireStructSize(len(b)); want > bound {
			t.Fatalf("proto.Size %d of a Struct of %d bytes over MaxWireStructSize %d", want, len(b), bound)
		}
	})
}

// wireStructSeeds are Struct encodings the standard codec does not write:
// map entries without key or value (which re-encode larger), a key
// repeated, a number with a long varint length.
func wireStructSeeds() [][]byte {
	return [][]byte{
		{0x0a, 0x00},                  // an entry with neither key nor value
		{0x0a, 0x00, 0x0a, 0x00},      // twice (the same key "")
		{0x0a, 0x03, 0x0a, 0x01, 'k'}, // key only
		{0x0a, 0x02, 0x12, 0x00},      // value only, without kind
		{0x0a, 0x05, 0x0a, 0x01, 'k', 0x12, 0x00, 0x0a, 0x00}, // "k", then ""
		{0x0a, 0x84, 0x80, 0x00, 0x12, 0x02, 0x20, 0x01},      // length in 3 bytes
	}
}

// TestWireStructSize checks WireStructSize and MaxWireStructSize on
// encodings the standard codec does not write.
func TestWireStructSize(t *testing.T) {
	for _, b := range wireStructSeeds() {
		s := &structpb.Struct{}
		if err := proto.Unmarshal(b, s); err != nil {
			t.Fatalf("%x: %v", b, err)
		}
		want := proto.Size(s)
		if got := WireStructSize(b); got != want {
			t.Fatalf("%x: WireStructSize %d, proto.Size %d", b, got, want)
		}
		if want > MaxWireStructSize(len(b)) {
			t.Fatalf("%x: proto.Size %d over MaxWireStructSize %d", b, want, MaxWireStructSize(len(b)))
		}
	}
	if got := proto.Size(mustStruct(t, []byte{0x0a, 0x00})); got != 6 {
		t.Fatalf("an empty entry re-encodes to %d bytes, want 6 (the bound's worst case)", got)
	}
}

func mustStruct(t *testing.T, b []byte) *structpb.Struct {
	t.Helper()
	s := &structpb.Struct{}
	if err := proto.Unmarshal(b, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestObjectSizesLeftEncoded: the size limit of an object the server's
// codec left encoded is that of the Struct decoded (proto.Size), also
// where its encoding is shorter (map entries without key or value) or
// longer (a key repeated), and for old_object.
func TestObjectSizesLeftEncoded(t *testing.T) {
	pod := structSizeSeeds()[0]
	podWire, err := proto.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range [][]byte{
		podWire,
		{0x0a, 0x00, 0x0a, 0x03, 0x0a, 0x01, 'k'},                    // re-encodes to 6+7 bytes
		append([]byte{0x0a, 0x04, 0x0a, 0x02, 'a', 'b'}, podWire...), // "ab" without value, then the pod
		append(append([]byte{}, podWire...), podWire...),             // every key twice
	} {
		want := mustStruct(t, st)
		size := proto.Size(want)
		for _, field := range []protowire.Number{1, 2} {
			b := protowire.AppendBytes(protowire.AppendTag(nil, field, protowire.BytesType), st)
			in := &arbiterv1.DecideRequest{}
			if err := arbiterv1.ServerCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, in); err != nil {
				t.Fatal(err)
			}
			if in.ObjectWire() == nil && in.OldObjectWire() == nil {
				t.Fatalf("%x: not left encoded", st)
			}
			name := map[protowire.Number]string{1: "object", 2: "old_object"}[field]
			for _, limit := range []int{size, size - 1, 3*len(st) - 1, 3 * len(st)} {
				err := (&Config{MaxObjectBytes: limit}).ObjectSizes(in)
				if over := size > limit; over != (err != nil) {
					t.Fatalf("%s of %d bytes (%d encoded), limit %d: %v", name, size, len(st), limit, err)
				}
				if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("%s is %d bytes", name, size)) {
					t.Fatalf("%s of %d bytes, limit %d: %v", name, size, limit, err)
				}
			}
		}
	}
}
