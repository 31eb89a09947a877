package arbiterv1

import (
	"sync"
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the standard "proto" codec used as fallback
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The gRPC codecs of Arbiter's processes. Messages of this package carry
// vtprotobuf's generated MarshalVT/UnmarshalVT (from `make proto`), which
// encode and decode without reflection — a DecideResponse of 16 results
// costs about a third of what the reflection-based codec spends on it.
// Other messages (health, reflection) go through the standard codec.
//
// vtprotobuf does not check that proto3 strings are valid UTF-8, which the
// standard codec refuses. So a server decodes what callers send with the
// standard codec (ServerCodec) — except DecideRequest, checked and then
// decoded with vtprotobuf (unmarshalDecideRequest) — and only decodes
// with vtprotobuf alone what its own kind sends (ClientCodec, for answers
// from an Arbiter server, and followers' streams from their primary).

type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVT(dAtA []byte) (int, error)
	UnmarshalVT(dAtA []byte) error
}

type codec struct {
	// vtDecode decodes this package's messages with vtprotobuf.
	vtDecode bool
}

// ServerCodec encodes this package's messages with vtprotobuf and decodes
// with the standard, validating codec.
func ServerCodec() encoding.CodecV2 { return codec{} }

// ClientCodec encodes and decodes this package's messages with vtprotobuf.
func ClientCodec() encoding.CodecV2 { return codec{vtDecode: true} }

func standard() encoding.CodecV2 { return encoding.GetCodecV2("proto") }

// Name implements encoding.CodecV2: the codec is the wire's "proto".
func (codec) Name() string { return "proto" }

// Marshal implements encoding.CodecV2.
func (codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMessage)
	if !ok {
		return standard().Marshal(v)
	}
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if _, err := m.MarshalToSizedBufferVT(buf); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := codecPool
	buf := pool.Get(size)
	if _, err := m.MarshalToSizedBufferVT((*buf)[:size]); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// RawMessage is a received message left encoded, in a pooled buffer: the
// receiver decodes it (UnmarshalVTUnsafe may alias the buffer) and calls
// Free once nothing of it is used any more. Only ClientCodec fills it.
type RawMessage struct {
	buf mem.Buffer
}

// Bytes returns the encoded message.
func (r *RawMessage) Bytes() []byte {
	if r.buf == nil {
		return nil
	}
	return r.buf.ReadOnlyData()
}

// Free returns the buffer to its pool; Bytes and what aliases it must not
// be used after.
func (r *RawMessage) Free() {
	if r.buf != nil {
		r.buf.Free()
		r.buf = nil
	}
}

// Unmarshal implements encoding.CodecV2.
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*RawMessage); ok && c.vtDecode {
		r.Free()
		r.buf = data.MaterializeToBuffer(codecPool)
		return nil
	}
	if req, ok := v.(*DecideRequest); ok && !c.vtDecode {
		return unmarshalDecideRequest(data, req)
	}
	m, ok := v.(vtMessage)
	if !c.vtDecode || !ok {
		return standard().Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(codecPool)
	defer buf.Free()
	// UnmarshalVT copies strings and bytes out of buf (RawMessage is for
	// receivers that decode with the aliasing UnmarshalVTUnsafe).
	return m.UnmarshalVT(buf.ReadOnlyData())
}

// unmarshalDecideRequest is the server's decoding of the request it serves
// most: vtprotobuf (several times faster than the standard codec on an
// object sent as a google.protobuf.Struct), after the check the standard
// codec makes and vtprotobuf does not — every string valid UTF-8, each
// occurrence on the wire (plainWire) — for requests of up to
// maxVTRequestBytes. What either refuses goes to the standard codec, which
// has the last word (vtprotobuf refuses some encodings the standard codec
// accepts, such as a known field with another wire type, kept as an
// unknown field). FuzzServerDecideRequest checks the server refuses and
// accepts what the standard codec does, and decodes the same message.
// Requests with unknown fields (from a newer client) go to the standard
// codec too.
//
// On that fast path the object and old_object Structs are not decoded
// into structpb messages (a message per Value, a Go map per Struct: most
// of the cost of a Pod sent as a Struct): unmarshalLeavingObjects copies
// their encoding to the message's unknown fields, where ObjectWire and
// OldObjectWire find it, and convert.RequestFromProto turns it into the
// engine's data in one pass over the wire (convert.structWireValue, the
// same value and sizes as decoding then structValue: FuzzStructWire);
// limits.ObjectSizes measures it. Those two are the server's only readers
// of a DecideRequest's objects (the gateway reaches the server over gRPC,
// through this codec). The message re-encodes to the same fields — the
// objects' after the others — so anything that forwards or logs it
// encoded sees the request it was sent.
func unmarshalDecideRequest(data mem.BufferSlice, req *DecideRequest) error {
	if data.Len() > maxVTRequestBytes {
		return standard().Unmarshal(data, req)
	}
	buf := data.MaterializeToBuffer(codecPool)
	defer buf.Free()
	b := buf.ReadOnlyData()
	if !plainWire(b, decideRequestWire()) || unmarshalLeavingObjects(b, req) != nil {
		req.Reset()
		return standard().Unmarshal(data, req)
	}
	return nil
}

// wireTypeOf is the wire type of the field fd (of its elements, for a
// list; packed lists of scalars are BytesType).
func wireTypeOf(fd protoreflect.FieldDescriptor) protowire.Type {
	switch fd.Kind() {
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind:
		return protowire.BytesType
	case protoreflect.GroupKind:
		return protowire.StartGroupType
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	}
	return protowire.VarintType
}

// maxVTRequestBytes bounds the requests unmarshalDecideRequest decodes with
// vtprotobuf, which has no recursion limit: each nested message takes at
// least two bytes (tag and length), so a message this small nests fewer
// than the standard codec's 10,000 levels (protowire.DefaultRecursionLimit),
// which it refuses to go beyond. Larger ones (objects of more than 16 KiB)
// go through the standard codec.
const maxVTRequestBytes = 16 << 10

// plainWire reports whether the encoded message b, of type m, is well
// formed, holds no group (proto3 has none; the decoders skip unknown ones
// differently), no singular field twice in one message (as encoders write
// them), and every string field of it and of the messages it holds (map
// entries included) is valid UTF-8, as the standard codec checks them (all
// of Arbiter's and struct.proto's strings are proto3): each occurrence of
// a field, even one a later occurrence replaces; and no unknown field, nor
// a known one of another wire type than its own.
func plainWire(b []byte, m *wireMessage) bool {
	var seen uint64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || !num.IsValid() || typ == protowire.StartGroupType || typ == protowire.EndGroupType {
			return false
		}
		b = b[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return false
		}
		b = b[n:]
		if int(num) >= len(m.fields) {
			return false // unknown
		}
		f := &m.fields[num]
		if !f.known || typ != f.typ && !(typ == protowire.BytesType && f.packed) {
			// An unknown field (vtprotobuf drops those of a Struct), or
			// a known one of another wire type (unknown to the standard
			// codec; vtprotobuf refuses it, or reads it as the field in
			// a map entry).
			return false
		}
		if f.bit != 0 {
			// Singular fields (and a oneof's) once each: the decoders
			// merge repeated occurrences differently.
			if seen&f.bit != 0 {
				return false
			}
			seen |= f.bit
		}
		switch {
		case f.str:
			if !utf8.Valid(v) {
				return false
			}
		case f.msg != nil:
			if !plainWire(v, f.msg) {
				return false
			}
		}
	}
	return true
}

// wireMessage is what plainWire needs of a message type, by field number.
type wireMessage struct {
	fields []wireField
}

type wireField struct {
	known  bool
	typ    protowire.Type // its wire type
	packed bool           // a list of scalars: BytesType too
	str    bool
	msg    *wireMessage
	bit    uint64 // a singular field's (or its oneof's) bit; 0 if repeated
}

// wireMessageOf builds the wireMessage of md and of the messages it holds.
func wireMessageOf(md protoreflect.MessageDescriptor, done map[protoreflect.FullName]*wireMessage) *wireMessage {
	if m := done[md.FullName()]; m != nil {
		return m
	}
	m := &wireMessage{}
	done[md.FullName()] = m
	fds := md.Fields()
	top := 0
	for i := range fds.Len() {
		top = max(top, int(fds.Get(i).Number()))
	}
	m.fields = make([]wireField, top+1)
	for i := range fds.Len() {
		fd := fds.Get(i)
		f := wireField{known: true, typ: wireTypeOf(fd)}
		if fd.Kind() == protoreflect.GroupKind {
			f.known = false
		}
		f.packed = fd.IsList() && f.typ != protowire.BytesType
		f.str = fd.Kind() == protoreflect.StringKind
		if fd.Kind() == protoreflect.MessageKind {
			f.msg = wireMessageOf(fd.Message(), done)
		}
		if fd.Cardinality() != protoreflect.Repeated {
			f.bit = 1 << (fd.Index() % 32)
			if o := fd.ContainingOneof(); o != nil {
				f.bit = 1 << (32 + o.Index()%32)
			}
		}
		m.fields[fd.Number()] = f
	}
	return m
}

// decideRequestWire is DecideRequest's wireMessage.
var decideRequestWire = sync.OnceValue(func() *wireMessage {
	return wireMessageOf((&DecideRequest{}).ProtoReflect().Descriptor(), map[protoreflect.FullName]*wireMessage{})
})

// codecPool holds the codecs' buffers. It is gRPC's default pool without
// the zeroing of every buffer it hands out (of its whole capacity: a
// megabyte for a message of half that): the codecs overwrite what they get
// whole — Marshal writes every byte of the message, MaterializeToBuffer
// copies one in.
var codecPool mem.BufferPool = newDirtyPool(1<<12, 1<<14, 1<<15, 1<<20)

type dirtyPool struct {
	tiers []dirtyTier
}

type dirtyTier struct {
	size int
	pool sync.Pool
}

func newDirtyPool(sizes ...int) *dirtyPool {
	p := &dirtyPool{tiers: make([]dirtyTier, len(sizes))}
	for i, n := range sizes {
		p.tiers[i].size = n
	}
	return p
}

// Get returns a buffer of n bytes, whose content is whatever it held.
func (p *dirtyPool) Get(n int) *[]byte {
	for i := range p.tiers {
		t := &p.tiers[i]
		if n > t.size {
			continue
		}
		if b, ok := t.pool.Get().(*[]byte); ok {
			*b = (*b)[:n]
			return b
		}
		b := make([]byte, n, t.size)
		return &b
	}
	b := make([]byte, n)
	return &b
}

// Put takes back a buffer from Get.
func (p *dirtyPool) Put(b *[]byte) {
	for i := range p.tiers {
		if t := &p.tiers[i]; cap(*b) == t.size {
			t.pool.Put(b)
			return
		}
	}
}
