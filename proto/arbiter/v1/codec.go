package arbiterv1

import (
	"sync"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the standard "proto" codec used as fallback
	"google.golang.org/grpc/mem"
)

// The gRPC codecs of Arbiter's processes. Messages of this package carry
// vtprotobuf's generated MarshalVT/UnmarshalVT (from `make proto`), which
// encode and decode without reflection — a DecideResponse of 16 results
// costs about a third of what the reflection-based codec spends on it.
// Other messages (health, reflection) go through the standard codec.
//
// vtprotobuf does not check that proto3 strings are valid UTF-8, which the
// standard codec refuses. So a server decodes what callers send with the
// standard codec (ServerCodec), and only decodes with vtprotobuf what its
// own kind sends (ClientCodec, for answers from an Arbiter server, and
// followers' streams from their primary).

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
