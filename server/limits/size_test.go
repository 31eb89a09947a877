package limits

import (
	"math"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
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

// FuzzStructSize checks StructSize against proto.Size on Structs decoded
// from random encodings (unknown fields among them).
func FuzzStructSize(f *testing.F) {
	for _, s := range structSizeSeeds() {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := &structpb.Struct{}
		if proto.Unmarshal(b, s) != nil {
			return
		}
		if got, want := StructSize(s), proto.Size(s); got != want {
			t.Fatalf("StructSize %d, proto.Size %d", got, want)
		}
	})
}
