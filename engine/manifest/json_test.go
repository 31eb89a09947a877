package manifest

import (
	"bytes"
	"reflect"
	"testing"

	utiljson "k8s.io/apimachinery/pkg/util/json"
)

var jsonSeeds = []string{
	`{"a":1,"b":-2.5,"c":"x","d":true,"e":false,"f":null,"g":[1,{"h":[]}],"i":{}}`,
	`{"big":9223372036854775807,"bigger":9223372036854775808,"neg":-9223372036854775808,"e":1e3,"f":1E-2,"z":0}`,
	`{"esc":"\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00","bad":"\ud800x","lone":"\udc00"}`,
	`{"dup":1,"dup":2}`,
	`{"dup":[1,2,3,"a long string"],"x":{"dup":[[1,2,3,4,5]],"dup":[]},"dup":[1]}`,
	` { "spaced" : [ 1 , 2 ] } `,
	`{"utf8":"héllo","invalid":"` + "\xff\xfe" + `"}`,
	`[1,2]`, `"s"`, `1`, `null`, `{`, `{"a":}`, `{"a":1,}`, `[1 2]`, `01`, `-`, `1.`, `1e`, `"\x"`, `{"a":1}x`,
	`{"huge":1e400}`, `{"tiny":1e-400}`,
}

func TestDecodeJSONMatchesKubernetes(t *testing.T) {
	for _, s := range jsonSeeds {
		checkSameAsKubernetes(t, []byte(s))
	}
}

// FuzzDecodeJSON checks the fast decoder against Kubernetes' JSON decoding:
// same value, or both an error.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkSameAsKubernetes(t, data) })
}

func checkSameAsKubernetes(t *testing.T, data []byte) {
	t.Helper()
	got, err := decodeJSONValue(data)
	var want any
	werr := utiljson.Unmarshal(data, &want)
	if (err == nil) != (werr == nil) {
		t.Fatalf("%q: fast err %v, kubernetes err %v", data, err, werr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\n fast %#v\n kube %#v", data, got, want)
	}
	// The sizes measured while decoding are those of the data.
	if v, sizes, err := decodeJSONValueSized(data); err == nil {
		if want := SizesOf(v); sizes != want {
			t.Fatalf("%q: decoder measured %+v, the data has %+v", data, sizes, want)
		}
	}
	// Decoding in place gives the same objects and sizes.
	obj, sizes, err := DecodeJSONSized(data)
	owned, ownedSizes, ownedErr := DecodeJSONSizedOwned(bytes.Clone(data))
	if (err == nil) != (ownedErr == nil) || !reflect.DeepEqual(obj, owned) || sizes != ownedSizes {
		t.Fatalf("%q: in place %#v %+v %v, copied %#v %+v %v", data, owned, ownedSizes, ownedErr, obj, sizes, err)
	}
}

func BenchmarkDecodeJSON(b *testing.B) {
	data := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"violating-pod","namespace":"bench","labels":{"app.kubernetes.io/name":"node-agent","app.kubernetes.io/part-of":"arbiter-bench"}},"spec":{"containers":[{"image":"registry.example.com/infra/node-agent:0.9","name":"agent","ports":[{"containerPort":9100,"hostPort":9100,"name":"metrics"}],"securityContext":{"allowPrivilegeEscalation":true,"capabilities":{"add":["SYS_ADMIN","NET_ADMIN"]},"privileged":true,"runAsUser":0,"seccompProfile":{"type":"Unconfined"}},"volumeMounts":[{"mountPath":"/host/run","name":"host-run"}]},{"command":["sleep","infinity"],"image":"registry.example.com/tools/busybox:1.36","name":"helper","securityContext":{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}}],"hostNetwork":true,"volumes":[{"hostPath":{"path":"/var/run","type":"Directory"},"name":"host-run"}]}}`)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeJSON(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("kubernetes", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m map[string]any
			if err := utiljson.Unmarshal(data, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
