package store

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"math/bits"
	"slices"
)

const (
	elemDomain   = "arbiter.store.object.v1\x00"
	digestDomain = "arbiter.store.digest.v1\x00"
	// DigestPrefix starts every digest string.
	DigestPrefix = "sha256:"
)

// sum256 is a 256-bit unsigned integer, least significant limb first; the
// additive accumulator of object hashes, modulo 2^256.
type sum256 [4]uint64

// limbs reads a 32-byte big-endian number.
func limbs(b *[32]byte) sum256 {
	return sum256{
		binary.BigEndian.Uint64(b[24:32]),
		binary.BigEndian.Uint64(b[16:24]),
		binary.BigEndian.Uint64(b[8:16]),
		binary.BigEndian.Uint64(b[0:8]),
	}
}

func (s *sum256) add(h *[32]byte) {
	x := limbs(h)
	var c uint64
	s[0], c = bits.Add64(s[0], x[0], 0)
	s[1], c = bits.Add64(s[1], x[1], c)
	s[2], c = bits.Add64(s[2], x[2], c)
	s[3], _ = bits.Add64(s[3], x[3], c)
}

func (s *sum256) sub(h *[32]byte) {
	x := limbs(h)
	var b uint64
	s[0], b = bits.Sub64(s[0], x[0], 0)
	s[1], b = bits.Sub64(s[1], x[1], b)
	s[2], b = bits.Sub64(s[2], x[2], b)
	s[3], _ = bits.Sub64(s[3], x[3], b)
}

// bytes renders s as 32 big-endian bytes.
func (s sum256) bytes() [32]byte {
	var out [32]byte
	binary.BigEndian.PutUint64(out[0:8], s[3])
	binary.BigEndian.PutUint64(out[8:16], s[2])
	binary.BigEndian.PutUint64(out[16:24], s[1])
	binary.BigEndian.PutUint64(out[24:32], s[0])
	return out
}

func sumFromBytes(b []byte) (sum256, error) {
	if len(b) != 32 {
		return sum256{}, fmt.Errorf("%w: digest accumulator has %d bytes, want 32", ErrCorrupt, len(b))
	}
	return limbs((*[32]byte)(b)), nil
}

// elemHasher computes object hashes; it reuses one SHA-256 state, so it is not
// safe for concurrent use.
type elemHasher struct {
	h   hash.Hash
	buf [4]byte
}

func newElemHasher() *elemHasher { return &elemHasher{h: sha256.New()} }

// hash returns SHA-256(elemDomain || uint32be(len(encKey)) || encKey || value).
func (e *elemHasher) hash(encKey, value []byte) [32]byte {
	e.h.Reset()
	e.h.Write([]byte(elemDomain))
	binary.BigEndian.PutUint32(e.buf[:], uint32(len(encKey)))
	e.h.Write(e.buf[:])
	e.h.Write(encKey)
	e.h.Write(value)
	var out [32]byte
	e.h.Sum(out[:0])
	return out
}

// renderDigest finalizes the accumulator and object count into the digest string:
// "sha256:" + hex(SHA-256(digestDomain || uint64be(count) || sum)).
func renderDigest(s sum256, count uint64) string {
	var buf [len(digestDomain) + 8 + 32]byte
	n := copy(buf[:], digestDomain)
	binary.BigEndian.PutUint64(buf[n:], count)
	sb := s.bytes()
	copy(buf[n+8:], sb[:])
	d := sha256.Sum256(buf[:])
	return DigestPrefix + hex.EncodeToString(d[:])
}

// EmptyDigest is the digest of a store holding no objects (revision 0, or any
// revision after every object was deleted).
var EmptyDigest = renderDigest(sum256{}, 0)

// ComputeDigest returns the digest a store holding exactly objs would report,
// whatever the order of objs. It fails, wrapping ErrInvalid, on an invalid key,
// an empty value or a key given twice.
func ComputeDigest(objs []Object) (string, error) {
	items, err := prepareObjects(objs)
	if err != nil {
		return "", err
	}
	s, n := sumItems(newElemHasher(), items)
	return renderDigest(s, n), nil
}

func sumItems(h *elemHasher, items []item) (sum256, uint64) {
	var s sum256
	for i := range items {
		e := h.hash(items[i].enc, items[i].value)
		s.add(&e)
	}
	return s, uint64(len(items))
}

// prepareObjects validates objs as a set of upserts and returns them sorted by key.
func prepareObjects(objs []Object) ([]item, error) {
	changes := make([]Change, len(objs))
	for i, o := range objs {
		changes[i] = Change{Op: OpUpsert, Key: o.Key, Value: o.Value}
	}
	return prepare(changes, "object")
}

// item is a validated change with its encoded key and its index in the input.
type item struct {
	idx   int
	key   Key
	enc   []byte
	op    Op
	value []byte
}

// prepare validates changes and returns them sorted by key, refusing
// duplicate keys. what names the element in error messages.
func prepare(changes []Change, what string) ([]item, error) {
	items := make([]item, len(changes))
	size := 0
	for i, c := range changes {
		if err := c.Key.Validate(); err != nil {
			return nil, fmt.Errorf("%s %d: %w", what, i, err)
		}
		switch c.Op {
		case OpUpsert:
			if len(c.Value) == 0 {
				return nil, fmt.Errorf("%w: %s %d (%s): upsert with an empty value", ErrInvalid, what, i, c.Key)
			}
			if int64(len(c.Value)) > maxValueSize {
				return nil, fmt.Errorf("%w: %s %d (%s): value of %d bytes is too large", ErrInvalid, what, i, c.Key, len(c.Value))
			}
		case OpDelete:
			if len(c.Value) != 0 {
				return nil, fmt.Errorf("%w: %s %d (%s): delete carries a value", ErrInvalid, what, i, c.Key)
			}
		default:
			return nil, fmt.Errorf("%w: %s %d (%s): unknown op %d", ErrInvalid, what, i, c.Key, int(c.Op))
		}
		size += len(c.Key.Group) + len(c.Key.Kind) + len(c.Key.Namespace) + len(c.Key.Name) + 3
	}
	buf := make([]byte, 0, size) // one allocation for every encoded key
	for i, c := range changes {
		start := len(buf)
		buf = appendKey(buf, c.Key)
		items[i] = item{idx: i, key: c.Key, enc: buf[start:len(buf):len(buf)], op: c.Op, value: c.Value}
	}
	slices.SortFunc(items, func(a, b item) int { return compareKeys(a.key, b.key) })
	for i := 1; i < len(items); i++ {
		if items[i-1].key == items[i].key {
			a, b := min(items[i-1].idx, items[i].idx), max(items[i-1].idx, items[i].idx)
			return nil, fmt.Errorf("%w: %ss %d and %d have the same key %s", ErrInvalid, what, a, b, items[i].key)
		}
	}
	return items, nil
}
