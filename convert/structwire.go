package convert

import (
	"errors"
	"math"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// structWireValue is structValue of the google.protobuf.Struct encoded in
// b, read straight from the wire: no structpb message is built. It gives
// what decoding b with the standard codec then structValue would
// (FuzzStructWire): integral numbers as int64, NaN and the infinities as
// the strings "NaN", "Infinity" and "-Infinity", a Value without kind as
// nil; a map entry without key has the key "", one without value the
// value nil, and of entries with the same key the last wins; fields
// other than Struct's, Value's and ListValue's (or of another wire type)
// are skipped, as the standard codec keeps them aside.
//
// b is what the server's codec checked (arbiterv1.DecideRequest's
// ObjectWire: every string valid UTF-8, no field of a Value or map entry
// twice), and belongs to the request: a copy the codec made out of its
// pooled buffer, which nothing changes once received (no DecideRequest
// is pooled, reset in place or decoded into again). So the strings of
// the result are slices of it, as the object decoded from object_json is
// of its bytes (TestStructWireStringsOwnNothingPooled).
func structWireValue(b []byte) (map[string]any, manifest.Sizes, error) {
	m := make(map[string]any, countWire(b, 1))
	var sizes manifest.Sizes
	replaced := false
	for {
		entry, rest, ok, err := field1(b)
		if err != nil {
			return nil, sizes, err
		}
		if !ok {
			break
		}
		b = rest
		key, val, err := mapEntryWire(entry)
		if err != nil {
			return nil, sizes, err
		}
		var v any
		var vs manifest.Sizes
		if val != nil {
			if v, vs, err = valueWire(val); err != nil {
				return nil, sizes, err
			}
		}
		k := wireString(key)
		before := len(m)
		m[k] = v
		replaced = replaced || len(m) == before
		sizes = sizes.Max(vs)
		sizes.Length = max(sizes.Length, uint64(len(k)))
	}
	if replaced {
		// What a replaced entry held counts no more.
		return m, manifest.SizesOf(m), nil
	}
	n := uint64(len(m))
	return m, sizes.Max(manifest.Sizes{Entries: n, Length: n}), nil
}

// mapEntryWire reads a Struct's map entry: its key and its value's
// encoding (nil if it has none).
func mapEntryWire(b []byte) (key, val []byte, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, nil, errBadWire
		}
		b = b[n:]
		if typ != protowire.BytesType || num != 1 && num != 2 {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return nil, nil, errBadWire
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, nil, errBadWire
		}
		b = b[n:]
		if num == 1 {
			key = v
			continue
		}
		if val != nil {
			// The standard codec would merge the two Values; the
			// server's codec refuses a field twice.
			return nil, nil, errRepeatedWire
		}
		val = v
		if val == nil {
			val = []byte{}
		}
	}
	return key, val, nil
}

// valueWire is valueOf of an encoded google.protobuf.Value.
func valueWire(b []byte) (any, manifest.Sizes, error) {
	var out any
	var sizes manifest.Sizes
	var err error
	kinds := 0
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, sizes, errBadWire
		}
		b = b[n:]
		known := true
		switch {
		case num == 1 && typ == protowire.VarintType: // null_value
			_, n = protowire.ConsumeVarint(b)
			out, sizes = nil, manifest.Sizes{}
		case num == 2 && typ == protowire.Fixed64Type: // number_value
			var bits uint64
			bits, n = protowire.ConsumeFixed64(b)
			out, sizes = numberValue(math.Float64frombits(bits))
		case num == 3 && typ == protowire.BytesType: // string_value
			var v []byte
			v, n = protowire.ConsumeBytes(b)
			out, sizes = wireString(v), manifest.Sizes{Length: uint64(len(v))}
		case num == 4 && typ == protowire.VarintType: // bool_value
			var v uint64
			v, n = protowire.ConsumeVarint(b)
			out, sizes = v != 0, manifest.Sizes{}
		case num == 5 && typ == protowire.BytesType: // struct_value
			var v []byte
			if v, n = protowire.ConsumeBytes(b); n >= 0 {
				out, sizes, err = structWireValue(v)
			}
		case num == 6 && typ == protowire.BytesType: // list_value
			var v []byte
			if v, n = protowire.ConsumeBytes(b); n >= 0 {
				out, sizes, err = listWireValue(v)
			}
		default:
			known = false
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return nil, sizes, errBadWire
		}
		if err != nil {
			return nil, sizes, err
		}
		b = b[n:]
		if known {
			if kinds++; kinds > 1 {
				// The standard codec keeps the last kind (merging
				// two Structs or lists); the server's codec
				// refuses a oneof twice.
				return nil, sizes, errRepeatedWire
			}
		}
	}
	return out, sizes, nil
}

// listWireValue is valueOf of an encoded google.protobuf.ListValue.
func listWireValue(b []byte) ([]any, manifest.Sizes, error) {
	l := make([]any, 0, countWire(b, 1))
	var sizes manifest.Sizes
	for {
		v, rest, ok, err := field1(b)
		if err != nil {
			return nil, sizes, err
		}
		if !ok {
			break
		}
		b = rest
		e, es, err := valueWire(v)
		if err != nil {
			return nil, sizes, err
		}
		l = append(l, e)
		sizes = sizes.Max(es)
	}
	n := uint64(len(l))
	return l, sizes.Max(manifest.Sizes{Entries: n, Length: n}), nil
}

// field1 returns the next length-delimited field 1 of the encoded message
// b (a Struct's map entry, a ListValue's value) and what follows it,
// skipping the other fields; ok is false at the end of b.
func field1(b []byte) (v, rest []byte, ok bool, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, nil, false, errBadWire
		}
		b = b[n:]
		if num != 1 || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return nil, nil, false, errBadWire
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, nil, false, errBadWire
		}
		return v, b[n:], true, nil
	}
	return nil, nil, false, nil
}

// countWire counts the length-delimited fields num of the encoded message
// b (0 if b is malformed: the decoding then says why).
func countWire(b []byte, num protowire.Number) int {
	c := 0
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return 0
		}
		b = b[l:]
		if l = protowire.ConsumeFieldValue(n, typ, b); l < 0 {
			return 0
		}
		b = b[l:]
		if n == num && typ == protowire.BytesType {
			c++
		}
	}
	return c
}

// numberValue is valueOf of a number_value.
func numberValue(f float64) (any, manifest.Sizes) {
	switch {
	case math.IsNaN(f):
		// As AsInterface: JSON has no NaN or infinities.
		return "NaN", manifest.Sizes{Length: 3}
	case math.IsInf(f, 1):
		return "Infinity", manifest.Sizes{Length: 8}
	case math.IsInf(f, -1):
		return "-Infinity", manifest.Sizes{Length: 9}
	}
	return normalizeNumber(f), manifest.Sizes{}
}

// wireString is b as a string sharing its bytes (see structWireValue).
func wireString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

var (
	errBadWire      = errors.New("not a valid google.protobuf.Struct encoding")
	errRepeatedWire = errors.New("a field of a google.protobuf.Value or map entry is repeated")
)
