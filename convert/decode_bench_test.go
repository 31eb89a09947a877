package convert

import (
	"os"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/yaml"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// benchRequests are the encoded DecideRequests of the bench Pod
// (engine/testdata/pss/compliant-pod.yaml, as the load test sends it) as
// a google.protobuf.Struct and as JSON.
func benchRequests(b *testing.B) (asStruct, asJSON []byte) {
	raw, err := os.ReadFile("../engine/testdata/pss/compliant-pod.yaml")
	if err != nil {
		b.Fatal(err)
	}
	var pod map[string]any
	if err := yaml.Unmarshal(raw, &pod); err != nil {
		b.Fatal(err)
	}
	s, err := structpb.NewStruct(pod)
	if err != nil {
		b.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(raw)
	if err != nil {
		b.Fatal(err)
	}
	if asStruct, err = proto.Marshal(&arbiterv1.DecideRequest{Object: s}); err != nil {
		b.Fatal(err)
	}
	if asJSON, err = proto.Marshal(&arbiterv1.DecideRequest{ObjectJson: j}); err != nil {
		b.Fatal(err)
	}
	return asStruct, asJSON
}

// BenchmarkDecodeConvertStruct is the server's decoding of a DecideRequest
// (its codec) and its conversion to the engine's request, the object a
// Struct; BenchmarkDecodeConvertJSON the same with object_json.
func BenchmarkDecodeConvertStruct(b *testing.B) {
	asStruct, _ := benchRequests(b)
	benchDecodeConvert(b, asStruct)
}

func BenchmarkDecodeConvertJSON(b *testing.B) {
	_, asJSON := benchRequests(b)
	benchDecodeConvert(b, asJSON)
}

func benchDecodeConvert(b *testing.B, data []byte) {
	codec := arbiterv1.ServerCodec()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		in := &arbiterv1.DecideRequest{}
		if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, in); err != nil {
			b.Fatal(err)
		}
		if _, _, err := RequestFromProto(in); err != nil {
			b.Fatal(err)
		}
	}
	// CPU time per operation (every thread's, the GC's included): what
	// other processes' load inflates far less than wall time.
	if used := cpuTime() - start; used > 0 && b.N > 0 {
		b.ReportMetric(float64(used.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}
