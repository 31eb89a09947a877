// Package patch applies and computes JSON patches. TEMPORARY stub until
// the native implementation lands: a JSON round trip through
// evanphx/json-patch v4.
package patch

import (
	"encoding/json"
	"errors"
	"fmt"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
)

// Op is one RFC 6902 operation.
type Op struct {
	Op, Path, From string
	Value          any
}

// ApplyJSONPatch applies ops to obj (not modified).
func ApplyJSONPatch(obj map[string]any, ops []Op) (map[string]any, error) {
	raw := make([]map[string]any, len(ops))
	for i, o := range ops {
		m := map[string]any{"op": o.Op, "path": o.Path}
		if o.From != "" {
			m["from"] = o.From
		}
		if o.Value != nil || o.Op == "add" || o.Op == "replace" || o.Op == "test" {
			m["value"] = o.Value
		}
		raw[i] = m
	}
	pb, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	p, err := jsonpatch.DecodePatch(pb)
	if err != nil {
		return nil, err
	}
	ob, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	out, err := p.Apply(ob)
	if err != nil {
		if errors.Is(err, jsonpatch.ErrTestFailed) {
			return obj, nil
		}
		return nil, fmt.Errorf("JSON Patch: %w", err)
	}
	var res map[string]any
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, err
	}
	return res, nil
}
