package authz

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/arbiter-pdp/arbiter/engine/admission"
)

func TestPrepare(t *testing.T) {
	in := map[string]any{"attributes": map[string]any{
		"contextExtensions": map[string]any{"team": "a"},
		"source":            map[string]any{"address": map[string]any{"socketAddress": map[string]any{"address": "10.0.0.1", "portValue": float64(8080), "protocol": "UDP"}}},
		"request":           map[string]any{"time": "2026-01-02T03:04:05Z", "http": map[string]any{"size": "12", "rawBody": "aGk=", "headers": map[string]any{"X-A": "b"}}},
		"unknownField":      "kept",
	}}
	out, sizes, err := Prepare(admission.ShapeEnvoy, in)
	if err != nil {
		t.Fatal(err)
	}
	attrs := out["attributes"].(map[string]any)
	if attrs["context_extensions"].(map[string]any)["team"] != "a" || attrs["unknownField"] != "kept" {
		t.Errorf("attributes: %v", attrs)
	}
	sa := attrs["source"].(map[string]any)["address"].(map[string]any)["socket_address"].(map[string]any)
	if sa["port_value"] != int64(8080) || sa["protocol"] != int64(1) || sa["resolver_name"] != "" {
		t.Errorf("socket address: %v", sa)
	}
	req := attrs["request"].(map[string]any)
	if !req["time"].(time.Time).Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("time: %v", req["time"])
	}
	h := req["http"].(map[string]any)
	if h["size"] != int64(12) || string(h["raw_body"].([]byte)) != "hi" || h["method"] != "" || h["headers"].(map[string]any)["X-A"] != "b" {
		t.Errorf("http: %v", h)
	}
	// defaults of messages the request does not have
	if d := attrs["destination"].(map[string]any)["address"].(map[string]any)["socket_address"].(map[string]any); d["address"] != "" || d["port_value"] != int64(0) {
		t.Errorf("destination: %v", d)
	}
	if sizes.Entries == 0 || sizes.Length == 0 {
		t.Errorf("sizes %+v", sizes)
	}
	// the input is not modified
	if _, ok := in["attributes"].(map[string]any)["context_extensions"]; ok {
		t.Error("Prepare modified its input")
	}

	out, _, err = Prepare(admission.ShapeHTTP, map[string]any{"attributes": map[string]any{"method": "GET", "body": "aGk=", "contentLength": float64(2)}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(out)
	if string(b) != `{"attributes":{"body":"aGk=","contentLength":2,"fragment":"","header":{},"host":"","method":"GET","path":"","protocol":"","query":{},"scheme":""}}` {
		t.Errorf("HTTP: %s", b)
	}
	for _, bad := range []map[string]any{
		{"attributes": "x"},
		{"attributes": map[string]any{"contentLength": "many"}},
		{"attributes": map[string]any{"header": []any{"x"}}},
		{"attributes": map[string]any{"body": 3.5}},
	} {
		if _, _, err := Prepare(admission.ShapeHTTP, bad); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
	if _, _, err := Prepare(admission.ShapeEnvoy, map[string]any{"attributes": map[string]any{"request": map[string]any{"time": "yesterday"}}}); err == nil {
		t.Error("a bad timestamp is accepted")
	}
}
