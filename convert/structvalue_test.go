package convert

import (
	"math"
	"os"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// referenceStructValue is what RequestFromProto did before structValue:
// the library's conversion (AsMap), then the integral numbers as int64,
// then the engine's own walk for the sizes.
func referenceStructValue(s *structpb.Struct) (map[string]any, manifest.Sizes) {
	m := s.AsMap()
	referenceNormalize(m)
	return m, manifest.SizesOf(m)
}

func referenceNormalize(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = referenceNormalize(e)
		}
	case []any:
		for i, e := range t {
			t[i] = referenceNormalize(e)
		}
	case float64:
		if t == float64(int64(t)) && t < 1<<53 && t > -(1<<53) {
			return int64(t)
		}
	}
	return v
}

// sameValue is reflect.DeepEqual for JSON-shaped data, but NaN equals NaN
// and a float64 never equals an int64.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) || (x == nil) != (y == nil) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !sameValue(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameValue(x[i], y[i]) {
				return false
			}
		}
		return true
	case float64:
		y, ok := b.(float64)
		return ok && (x == y && math.Signbit(x) == math.Signbit(y) || math.IsNaN(x) && math.IsNaN(y))
	}
	return a == b
}

// checkStructValue compares structValue with the library conversion.
func checkStructValue(t *testing.T, s *structpb.Struct) {
	t.Helper()
	got, gotSizes := structValue(s)
	want, wantSizes := referenceStructValue(s)
	if !sameValue(got, want) {
		t.Fatalf("structValue differs from AsMap + normalized numbers:\n got %#v\nwant %#v", got, want)
	}
	if gotSizes != wantSizes {
		t.Fatalf("sizes %+v, SizesOf gives %+v", gotSizes, wantSizes)
	}
}

func structSeeds(t testing.TB) []*structpb.Struct {
	raw, err := os.ReadFile("../engine/testdata/pss/compliant-pod.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pod map[string]any
	if err := yaml.Unmarshal(raw, &pod); err != nil {
		t.Fatal(err)
	}
	podStruct, err := structpb.NewStruct(pod)
	if err != nil {
		t.Fatal(err)
	}
	num := structpb.NewNumberValue
	return []*structpb.Struct{
		podStruct,
		{},
		{Fields: map[string]*structpb.Value{
			"int": num(3), "half": num(1.5), "neg": num(-7), "zero": num(0), "negzero": num(math.Copysign(0, -1)),
			"2^53": num(1 << 53), "2^53-1": num(1<<53 - 1), "-2^53": num(-(1 << 53)), "-2^53+1": num(-(1<<53 - 1)),
			"big": num(1e300), "nan": num(math.NaN()), "inf": num(math.Inf(1)), "-inf": num(math.Inf(-1)),
			"null": structpb.NewNullValue(), "unset": {}, "true": structpb.NewBoolValue(true), "": structpb.NewStringValue(""),
			"list": structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{num(1), {}, structpb.NewStringValue("a longer string"),
				structpb.NewListValue(&structpb.ListValue{}), structpb.NewStructValue(&structpb.Struct{})}}),
			"nil struct": structpb.NewStructValue(nil), "nil list": structpb.NewListValue(nil),
			"a key longer than every value in this struct": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"x": nil}}),
		}},
	}
}

// TestStructValue checks the conversion of a Struct to the engine's data
// against the library's AsMap on the seeds of FuzzStructValue.
func TestStructValue(t *testing.T) {
	for _, s := range structSeeds(t) {
		checkStructValue(t, s)
	}
}

// FuzzStructValue checks structValue against AsMap + normalized numbers +
// SizesOf on Structs decoded from random protobuf encodings.
func FuzzStructValue(f *testing.F) {
	for _, s := range structSeeds(f) {
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
		checkStructValue(t, s)
	})
}
