package arbiterv1

import (
	"google.golang.org/protobuf/encoding/protowire"
)

// The field numbers of DecideRequest's object and old_object
// (TestObjectWireFieldNumbers checks them against decision.proto).
const (
	decideRequestObject    protowire.Number = 1
	decideRequestOldObject protowire.Number = 2
)

// ObjectWire returns the object field's google.protobuf.Struct still in
// its protobuf encoding, when the server's codec left it so
// (unmarshalDecideRequest: the message then holds it as its unknown
// fields, and GetObject is nil); nil otherwise (GetObject has the object,
// if any). A server reads the object through convert.RequestFromProto and
// limits.ObjectSizes, which look here first.
func (x *DecideRequest) ObjectWire() []byte {
	return x.objectWire(decideRequestObject)
}

// OldObjectWire is ObjectWire for old_object.
func (x *DecideRequest) OldObjectWire() []byte {
	return x.objectWire(decideRequestOldObject)
}

// objectWire returns the content of field num (a Struct left encoded) in
// x's unknown fields, if x has not the field decoded. Only the server's
// codec puts a known field there; a message built otherwise with both
// the field decoded and the same field among its unknown fields (which
// its encoding would merge) reads as the decoded field alone.
func (x *DecideRequest) objectWire(num protowire.Number) []byte {
	if x == nil || len(x.unknownFields) == 0 {
		return nil
	}
	if num == decideRequestObject && x.Object != nil || num == decideRequestOldObject && x.OldObject != nil {
		return nil
	}
	b := []byte(x.unknownFields)
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil
		}
		b = b[l:]
		if typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return nil
			}
			if n == num {
				// The codec writes each at most once; it is
				// never empty, even for an empty Struct (whose
				// field it cuts out with its tag).
				if v == nil {
					v = []byte{}
				}
				return v
			}
			b = b[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(n, typ, b)
		if l < 0 {
			return nil
		}
		b = b[l:]
	}
	return nil
}

// unmarshalLeavingObjects decodes b (which plainWire accepted) into req
// with vtprotobuf, but for the object and old_object fields, whose
// encoding (tag, length and Struct) it copies to req's unknown fields for
// ObjectWire and OldObjectWire: the server converts them to the engine's
// data straight from the wire (convert.RequestFromProto), without the
// tree of structpb messages. The message encodes to the same fields
// (unknown fields come last: an encoding of the same message).
func unmarshalLeavingObjects(b []byte, req *DecideRequest) error {
	// plainWire accepted b: well formed, each singular field once.
	var spans [2][2]int
	cuts, size := 0, 0
	for i := 0; i < len(b); {
		num, typ, n := protowire.ConsumeTag(b[i:])
		if n < 0 {
			return protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[i+n:])
		if m < 0 {
			return protowire.ParseError(m)
		}
		if typ == protowire.BytesType && (num == decideRequestObject || num == decideRequestOldObject) {
			if cuts == len(spans) {
				return errRepeatedObject
			}
			spans[cuts] = [2]int{i, i + n + m}
			cuts++
			size += n + m
		}
		i += n + m
	}
	if cuts == 0 {
		return req.UnmarshalVT(b)
	}
	raw := make([]byte, 0, size)
	start := 0
	for _, s := range spans[:cuts] {
		// Decoding consecutive parts merges them (UnmarshalVT does not
		// reset req), as decoding their concatenation would.
		if err := req.UnmarshalVT(b[start:s[0]]); err != nil {
			return err
		}
		raw = append(raw, b[s[0]:s[1]]...)
		start = s[1]
	}
	if err := req.UnmarshalVT(b[start:]); err != nil {
		return err
	}
	req.unknownFields = raw
	return nil
}

type wireError string

func (e wireError) Error() string { return string(e) }

const errRepeatedObject = wireError("proto: DecideRequest: object fields repeated")
