package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

const maxValueSize = (1 << 31) - 2 // bbolt's MaxValueSize

const entryVersion = 1

// Changelog entry encoding (value of the changelog bucket, keyed by
// big-endian revision):
//
//	byte     version (1)
//	uint64be commit time, Unix nanoseconds (0 = unknown)
//	uvarint  len(digest), digest
//	uvarint  number of changes, then for each change:
//	  byte    op
//	  uvarint len(encoded key), encoded key
//	  uvarint len(value), value      (upserts only)
func appendEntry(dst []byte, digest string, t time.Time, changes []Change) []byte {
	dst = append(dst, entryVersion)
	dst = binary.BigEndian.AppendUint64(dst, uint64(unixNano(t)))
	dst = binary.AppendUvarint(dst, uint64(len(digest)))
	dst = append(dst, digest...)
	dst = binary.AppendUvarint(dst, uint64(len(changes)))
	var kb []byte
	for _, c := range changes {
		dst = append(dst, byte(c.Op))
		kb = appendKey(kb[:0], c.Key)
		dst = binary.AppendUvarint(dst, uint64(len(kb)))
		dst = append(dst, kb...)
		if c.Op == OpUpsert {
			dst = binary.AppendUvarint(dst, uint64(len(c.Value)))
			dst = append(dst, c.Value...)
		}
	}
	return dst
}

// decodeEntry decodes a changelog entry. v may be bbolt memory: it is copied
// once, and the returned values are capacity-limited sub-slices of that copy.
func decodeEntry(rev uint64, v []byte, in interner) (ChangeSet, error) {
	r := reader{b: append([]byte(nil), v...)}
	if ver := r.byte(); r.err == nil && ver != entryVersion {
		return ChangeSet{}, fmt.Errorf("%w: changelog entry %d has unknown version %d", ErrCorrupt, rev, ver)
	}
	cs := ChangeSet{Revision: rev}
	cs.Time = fromUnixNano(int64(r.u64()))
	cs.Digest = string(r.chunk())
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)) {
		r.err = errShort
	}
	if r.err == nil {
		cs.Changes = make([]Change, 0, n)
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		op := Op(r.byte())
		kb := r.chunk()
		if r.err != nil {
			break
		}
		k, err := decodeKey(kb, in)
		if err != nil {
			return ChangeSet{}, fmt.Errorf("changelog entry %d: %w", rev, err)
		}
		c := Change{Op: op, Key: k}
		switch op {
		case OpUpsert:
			c.Value = r.chunk()
		case OpDelete:
		default:
			return ChangeSet{}, fmt.Errorf("%w: changelog entry %d: unknown op %d", ErrCorrupt, rev, op)
		}
		cs.Changes = append(cs.Changes, c)
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d trailing bytes", len(r.b))
	}
	if r.err != nil {
		return ChangeSet{}, fmt.Errorf("%w: changelog entry %d: %v", ErrCorrupt, rev, r.err)
	}
	return cs, nil
}

// Idempotency record (value of the idem bucket, keyed by the idempotency key):
//
//	uint64be revision, uint64be commit time (Unix ns), byte flags (bit 0: unchanged), digest
type idemRecord struct {
	rev       uint64
	time      time.Time
	unchanged bool
	digest    string
}

func (r idemRecord) append(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, r.rev)
	dst = binary.BigEndian.AppendUint64(dst, uint64(unixNano(r.time)))
	var flags byte
	if r.unchanged {
		flags |= 1
	}
	dst = append(dst, flags)
	return append(dst, r.digest...)
}

func decodeIdem(v []byte) (idemRecord, error) {
	if len(v) < 17 {
		return idemRecord{}, fmt.Errorf("%w: idempotency record of %d bytes", ErrCorrupt, len(v))
	}
	return idemRecord{
		rev:       binary.BigEndian.Uint64(v[0:8]),
		time:      fromUnixNano(int64(binary.BigEndian.Uint64(v[8:16]))),
		unchanged: v[16]&1 != 0,
		digest:    string(v[17:]),
	}, nil
}

var errShort = errors.New("truncated")

// reader decodes the formats above; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) byte() byte {
	if r.err != nil || len(r.b) < 1 {
		r.err = errShort
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) u64() uint64 {
	if r.err != nil || len(r.b) < 8 {
		r.err = errShort
		return 0
	}
	v := binary.BigEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

// chunk reads a uvarint length and that many bytes, capacity-limited.
func (r *reader) chunk() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errShort
		return nil
	}
	c := r.b[:n:n]
	r.b = r.b[n:]
	return c
}

func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), v) }

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
