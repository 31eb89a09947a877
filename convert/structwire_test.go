package convert

import (
	"math"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// Struct encodings written by hand: what the standard codec accepts but
// does not write.
func wField(num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), v)
}

func wEntry(parts ...[]byte) []byte { return wField(1, cat(parts...)) } // a Struct's map entry
func wKey(k string) []byte          { return wField(1, []byte(k)) }
func wVal(v []byte) []byte          { return wField(2, v) } // an entry's Value
func wStr(s string) []byte          { return wField(3, []byte(s)) }
func wStruct(entries ...[]byte) []byte {
	return wField(5, cat(entries...))
}
func wList(values ...[]byte) []byte { // a list_value of the Values given
	var l []byte
	for _, v := range values {
		l = append(l, wField(1, v)...)
	}
	return wField(6, l)
}
func wNum(f float64) []byte {
	return protowire.AppendFixed64(protowire.AppendTag(nil, 2, protowire.Fixed64Type), math.Float64bits(f))
}
func wVarint(num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// TestStructWireValue: the edge cases of a Struct read from the wire, each
// with the value and sizes expected, and checked against the standard
// decoding + structValue.
func TestStructWireValue(t *testing.T) {
	long := "a string longer than any other"
	for _, c := range []struct {
		name  string
		wire  []byte
		want  map[string]any
		sizes manifest.Sizes
	}{
		{"empty", nil, map[string]any{}, manifest.Sizes{}},
		{"numbers", cat(wEntry(wKey("i"), wVal(wNum(3))), wEntry(wKey("f"), wVal(wNum(1.5))), wEntry(wKey("big"), wVal(wNum(1<<53))),
			wEntry(wKey("neg"), wVal(wNum(-(1<<53-1))))),
			map[string]any{"i": int64(3), "f": 1.5, "big": float64(1 << 53), "neg": int64(-(1<<53 - 1))}, manifest.Sizes{Entries: 4, Length: 4}},
		{"NaN and infinities as strings", cat(wEntry(wKey("n"), wVal(wNum(math.NaN()))), wEntry(wKey("p"), wVal(wNum(math.Inf(1)))),
			wEntry(wKey("m"), wVal(wNum(math.Inf(-1))))),
			map[string]any{"n": "NaN", "p": "Infinity", "m": "-Infinity"}, manifest.Sizes{Entries: 3, Length: 9}},
		{"null, bool, a Value without kind", cat(wEntry(wKey("null"), wVal(wVarint(1, 0))), wEntry(wKey("t"), wVal(wVarint(4, 1))),
			wEntry(wKey("f"), wVal(wVarint(4, 0))), wEntry(wKey("none"), wVal(nil))),
			map[string]any{"null": nil, "t": true, "f": false, "none": nil}, manifest.Sizes{Entries: 4, Length: 4}},
		{"bool as a long varint", wEntry(wKey("b"), wVal(wVarint(4, 1<<40))), map[string]any{"b": true}, manifest.Sizes{Entries: 1, Length: 1}},
		{"entry without key", wEntry(wVal(wStr("v"))), map[string]any{"": "v"}, manifest.Sizes{Entries: 1, Length: 1}},
		{"entry without value", wEntry(wKey("k")), map[string]any{"k": nil}, manifest.Sizes{Entries: 1, Length: 1}},
		{"empty entry", wEntry(), map[string]any{"": nil}, manifest.Sizes{Entries: 1, Length: 1}},
		{"value before key", wEntry(wVal(wStr("vv")), wKey("k")), map[string]any{"k": "vv"}, manifest.Sizes{Entries: 1, Length: 2}},
		{"key repeated: the last wins, the first's sizes count no more",
			cat(wEntry(wKey("k"), wVal(wStr(long))), wEntry(wKey("k"), wVal(wNum(1)))),
			map[string]any{"k": int64(1)}, manifest.Sizes{Entries: 1, Length: 1}},
		{"nested", cat(wEntry(wKey("s"), wVal(wStruct(wEntry(wKey("l"), wVal(wList(wNum(1), nil, wStr("abc"), wList(), wStruct()))))))),
			map[string]any{"s": map[string]any{"l": []any{int64(1), nil, "abc", []any{}, map[string]any{}}}}, manifest.Sizes{Entries: 5, Length: 5}},
		{"unknown fields skipped", cat(wVarint(7, 1), wEntry(wKey("k"), wVarint(9, 2), wVal(cat(wStr("v"), wVarint(20, 1))))),
			map[string]any{"k": "v"}, manifest.Sizes{Entries: 1, Length: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, sizes, err := structWireValue(c.wire)
			if err != nil {
				t.Fatal(err)
			}
			if !sameValue(got, c.want) || sizes != c.sizes {
				t.Fatalf("got %#v %+v, want %#v %+v", got, sizes, c.want, c.sizes)
			}
			s := &structpb.Struct{}
			if err := proto.Unmarshal(c.wire, s); err != nil {
				t.Fatal(err)
			}
			ref, refSizes := structValue(s)
			if !sameValue(got, ref) || sizes != refSizes {
				t.Fatalf("standard decoding + structValue: %#v %+v", ref, refSizes)
			}
		})
	}
	// What the server's codec refuses, and what is not a Struct.
	for _, b := range [][]byte{
		wEntry(wKey("k"), wVal(cat(wStr("a"), wNum(1)))), // a Value of two kinds
		wEntry(wKey("k"), wVal(nil), wVal(nil)),          // an entry of two Values
		{0x0a, 0x05, 0x0a},                               // truncated
		wEntry(wKey("k"), wVal([]byte{0x1a, 0x09})),      // a string past its Value
	} {
		if _, _, err := structWireValue(b); err == nil {
			t.Errorf("%x: accepted", b)
		}
	}
}

// TestStructWireStringsOwnNothingPooled: the strings of an object the
// server's codec left encoded stay intact when the codec's buffers are
// reused (they are slices of the request's own copy).
func TestStructWireStringsOwnNothingPooled(t *testing.T) {
	pod, _ := structpb.NewStruct(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "web"}})
	b, _ := proto.Marshal(&arbiterv1.DecideRequest{Object: pod})
	in := &arbiterv1.DecideRequest{}
	if err := arbiterv1.ServerCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, in); err != nil {
		t.Fatal(err)
	}
	req, _, err := RequestFromProto(in)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 'x'
	}
	// Reuse the codec's pooled buffers with other content.
	for range 8 {
		other, _ := proto.Marshal(&arbiterv1.DecideRequest{Object: &structpb.Struct{Fields: map[string]*structpb.Value{
			"apiVersion": structpb.NewStringValue("zz"), "kind": structpb.NewStringValue("Zzz")}}})
		if err := arbiterv1.ServerCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(other)}, &arbiterv1.DecideRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "web"}}
	if !sameValue(req.Object, want) {
		t.Fatalf("object %#v, want %#v", req.Object, want)
	}
}

func structWireSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for _, s := range structSeeds(t) {
		for _, r := range []*arbiterv1.DecideRequest{{Object: s}, {Object: s, OldObject: s, Operation: arbiterv1.Operation_OPERATION_UPDATE}} {
			b, err := proto.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			seeds = append(seeds, b)
		}
	}
	for _, s := range [][]byte{
		cat(wEntry(wKey("apiVersion"), wVal(wStr("v1"))), wEntry(wKey("kind"), wVal(wStr("Pod"))), wEntry(wKey("kind"), wVal(wStr("ConfigMap")))),
		cat(wEntry(), wEntry(wKey("k")), wEntry(wVal(wNum(1))), wEntry(wKey("k"), wVal(wStruct(wEntry(wKey("x"), wVal(wStr("long value")))))), wEntry(wKey("k"), wVal(nil))),
	} {
		seeds = append(seeds, wField(1, s), cat(wField(2, s), wVarint(5, 3)))
	}
	return seeds
}

// FuzzStructWire checks the server's path for a DecideRequest's objects
// sent as Structs — its codec, leaving them encoded, then RequestFromProto
// reading them from the wire — against the standard codec then
// structValue: the same requests refused, the same engine objects and
// sizes, the same conversion errors.
func FuzzStructWire(f *testing.F) {
	for _, b := range structWireSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := &arbiterv1.DecideRequest{}
		wantErr := proto.Unmarshal(b, want)
		got := &arbiterv1.DecideRequest{}
		gotErr := arbiterv1.ServerCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("server codec error %v, standard codec error %v", gotErr, wantErr)
		}
		if wantErr != nil {
			return
		}
		for _, o := range []struct {
			name string
			st   *structpb.Struct
			wire []byte
		}{{"object", want.GetObject(), got.ObjectWire()}, {"old_object", want.GetOldObject(), got.OldObjectWire()}} {
			if o.wire == nil {
				continue
			}
			if o.st == nil {
				t.Fatalf("%s left encoded, absent from the standard decoding", o.name)
			}
			m, sizes, err := structWireValue(o.wire)
			if err != nil {
				t.Fatalf("%s: %v", o.name, err)
			}
			ref, refSizes := structValue(o.st)
			if !sameValue(m, ref) || sizes != refSizes {
				t.Fatalf("%s from the wire %#v %+v, standard decoding + structValue %#v %+v", o.name, m, sizes, ref, refSizes)
			}
		}
		gotReq, gotOpts, gotErr := RequestFromProto(got)
		wantReq, wantOpts, wantErr := RequestFromProto(want)
		if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
			t.Fatalf("RequestFromProto: error %v, from the standard decoding %v", gotErr, wantErr)
		}
		if wantErr != nil {
			return
		}
		if !sameValue(gotReq.Object, wantReq.Object) || !sameValue(gotReq.OldObject, wantReq.OldObject) {
			t.Fatalf("RequestFromProto: objects %#v / %#v, from the standard decoding %#v / %#v",
				gotReq.Object, gotReq.OldObject, wantReq.Object, wantReq.OldObject)
		}
		if (gotOpts.ObjectSizes == nil) != (wantOpts.ObjectSizes == nil) || gotOpts.ObjectSizes != nil && *gotOpts.ObjectSizes != *wantOpts.ObjectSizes {
			t.Fatalf("RequestFromProto: sizes %v, from the standard decoding %v", gotOpts.ObjectSizes, wantOpts.ObjectSizes)
		}
	})
}
