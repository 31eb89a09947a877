package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// ValidateFunc inspects a write before it commits. It runs inside the write
// transaction, after the changes are applied to it and before anything else
// is persisted; returning an error rolls the transaction back, leaving the
// store unchanged, and the write fails with an error wrapping both ErrRejected
// and the returned error. It is called only for writes that change something.
//
// p is valid only until the function returns. The function must not call the
// Store's write methods (they would deadlock) and should not use its read
// methods, which see the state before the write; use p instead. Writes wait
// for it, so it should be quick: typically it compiles p.Changes() into a copy
// of the caller's own compiled cache and keeps the result, to be swapped in
// once the write method has returned successfully.
type ValidateFunc func(ctx context.Context, p *Pending) error

// Pending is a read view of the state a write would produce, passed to a ValidateFunc.
type Pending struct {
	tx      *bolt.Tx
	base    uint64
	rev     uint64
	digest  string
	count   int
	changes []Change
}

func (p *Pending) live() {
	if p.tx == nil {
		panic("store: Pending used after its ValidateFunc returned")
	}
}

// Base returns the revision before the write (the state the changes apply to).
func (p *Pending) Base() uint64 { return p.base }

// Revision returns the revision the write will produce. It is Base()+1 except
// for ReplaceAll, which installs the snapshot's revision, and for a batch whose
// MinRevision is higher.
func (p *Pending) Revision() uint64 { return p.rev }

// Digest returns the content digest the write will produce.
func (p *Pending) Digest() string { return p.digest }

// Len returns the number of objects after the write.
func (p *Pending) Len() int { return p.count }

// Changes returns the changes that take the state at Base() to the state at
// Revision(), sorted by key, one per key. For ReplaceAll it is the difference
// between the old content and the snapshot. The slice must not be modified.
func (p *Pending) Changes() []Change { p.live(); return p.changes }

// Get returns a copy of the value of k after the write.
func (p *Pending) Get(k Key) ([]byte, bool) {
	p.live()
	if k.Validate() != nil {
		return nil, false
	}
	v := p.tx.Bucket(bucketObjects).Get(appendKey(nil, k))
	if v == nil {
		return nil, false
	}
	return bytes.Clone(v), true
}

// ForEach calls fn for every object after the write, in key order, with a
// copied value, stopping at the first error, which it returns.
func (p *Pending) ForEach(fn func(Object) error) error {
	p.live()
	in := interner{}
	c := p.tx.Bucket(bucketObjects).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		key, err := decodeKey(k, in)
		if err != nil {
			return err
		}
		if err := fn(Object{Key: key, Value: bytes.Clone(v)}); err != nil {
			return err
		}
	}
	return nil
}

// Apply writes a batch: the primary write path. See Batch for the semantics of
// no-op changes, ExpectedRevision, IdempotencyKey and MinRevision (an
// idempotency replay is checked first, then the expected revision). When validate is not nil it
// vets the would-be state before commit (see ValidateFunc). Cancelling ctx
// before the commit point abandons the write.
func (s *Store) Apply(ctx context.Context, b Batch, validate ValidateFunc) (Commit, error) {
	if err := ctx.Err(); err != nil {
		return Commit{}, err
	}
	if len(b.IdempotencyKey) > MaxIdempotencyKeyLen {
		return Commit{}, fmt.Errorf("%w: idempotency key longer than %d bytes", ErrInvalid, MaxIdempotencyKeyLen)
	}
	items, err := prepare(b.Changes, "change")
	if err != nil {
		return Commit{}, err
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tx, cur, err := s.begin()
	if err != nil {
		return Commit{}, err
	}
	defer tx.Rollback()

	if b.IdempotencyKey != "" {
		if v := tx.Bucket(bucketIdem).Get([]byte(b.IdempotencyKey)); v != nil {
			return replay(tx, v)
		}
	}
	if b.ExpectedRevision != 0 && b.ExpectedRevision != cur.Revision {
		return Commit{}, &RevisionError{Err: ErrConflict, Current: cur.Revision, Requested: b.ExpectedRevision}
	}

	m := cur.meta()
	objs := tx.Bucket(bucketObjects)
	eff := make([]Change, 0, len(items))
	for i := range items {
		it := &items[i]
		old := objs.Get(it.enc)
		switch it.op {
		case OpUpsert:
			if old != nil && bytes.Equal(old, it.value) {
				continue
			}
			if old != nil {
				h := s.hasher.hash(it.enc, old)
				m.sum.sub(&h)
			} else {
				m.count++
			}
			h := s.hasher.hash(it.enc, it.value)
			m.sum.add(&h)
			if err := objs.Put(it.enc, it.value); err != nil {
				return Commit{}, fmt.Errorf("store: apply: put %s: %w", it.key, err)
			}
		case OpDelete:
			if old == nil {
				continue
			}
			h := s.hasher.hash(it.enc, old)
			m.sum.sub(&h)
			m.count--
			if err := objs.Delete(it.enc); err != nil {
				return Commit{}, fmt.Errorf("store: apply: delete %s: %w", it.key, err)
			}
		}
		eff = append(eff, Change{Op: it.op, Key: it.key, Value: it.value})
	}

	bump := b.MinRevision > cur.Revision
	if len(eff) == 0 && !bump {
		c := Commit{Revision: cur.Revision, Digest: cur.Digest, Time: cur.Time, Unchanged: true}
		if b.IdempotencyKey != "" {
			rec := idemRecord{rev: cur.Revision, time: cur.Time, unchanged: true, digest: cur.Digest}
			if err := putIdem(tx, b.IdempotencyKey, rec); err != nil {
				return Commit{}, err
			}
			// Only the record is written: commit without publishing, as the
			// revision does not move and watchers must not wake.
			if err := ctx.Err(); err != nil {
				return Commit{}, err
			}
			if err := tx.Commit(); err != nil {
				return Commit{}, fmt.Errorf("store: commit idempotency record: %w", err)
			}
		}
		return c, nil
	}

	m.rev++
	if bump && b.MinRevision > m.rev {
		// Revisions are skipped: drop the history before the new one (compact
		// removes the entries and their idempotency records).
		m.rev = b.MinRevision
		m.oldest = m.rev - 1
	}
	m.time = now()
	digest := renderDigest(m.sum, m.count)
	if err := runValidate(ctx, validate, tx, cur.Revision, m, digest, eff); err != nil {
		return Commit{}, err
	}
	if b.IdempotencyKey != "" {
		rec := idemRecord{rev: m.rev, time: m.time, digest: digest}
		if err := putIdem(tx, b.IdempotencyKey, rec); err != nil {
			return Commit{}, err
		}
	}
	if err := s.finish(ctx, tx, m, digest, eff, true); err != nil {
		return Commit{}, err
	}
	return Commit{Revision: m.rev, Digest: digest, Time: m.time, Changes: eff}, nil
}

// ApplyChangeSet applies a change set received from a primary: the follower
// path. cs.Revision must be the current revision plus one, else a
// *RevisionError wrapping ErrOutOfOrder (a follower that receives a revision it
// already has may skip it). After applying the changes the resulting digest
// must equal cs.Digest, else a *DigestMismatchError and nothing is written: the
// follower has diverged and must install a snapshot. The change set is stored
// in this store's changelog as is, so a follower can serve ChangesSince too.
// validate works as for Apply.
func (s *Store) ApplyChangeSet(ctx context.Context, cs ChangeSet, validate ValidateFunc) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	items, err := prepare(cs.Changes, "change")
	if err != nil {
		return err
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tx, cur, err := s.begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if cs.Revision != cur.Revision+1 {
		return &RevisionError{Err: ErrOutOfOrder, Current: cur.Revision, Requested: cs.Revision}
	}
	m := cur.meta()
	objs := tx.Bucket(bucketObjects)
	changes := make([]Change, len(items))
	for i := range items {
		it := &items[i]
		old := objs.Get(it.enc)
		if old != nil {
			h := s.hasher.hash(it.enc, old)
			m.sum.sub(&h)
			m.count--
		}
		switch it.op {
		case OpUpsert:
			h := s.hasher.hash(it.enc, it.value)
			m.sum.add(&h)
			m.count++
			if old == nil || !bytes.Equal(old, it.value) {
				if err := objs.Put(it.enc, it.value); err != nil {
					return fmt.Errorf("store: apply change set %d: put %s: %w", cs.Revision, it.key, err)
				}
			}
		case OpDelete:
			if old != nil {
				if err := objs.Delete(it.enc); err != nil {
					return fmt.Errorf("store: apply change set %d: delete %s: %w", cs.Revision, it.key, err)
				}
			}
		}
		changes[i] = Change{Op: it.op, Key: it.key, Value: it.value}
	}
	m.rev = cs.Revision
	m.time = fromUnixNano(unixNano(cs.Time))
	digest := renderDigest(m.sum, m.count)
	if digest != cs.Digest {
		return &DigestMismatchError{Revision: cs.Revision, Want: cs.Digest, Got: digest}
	}
	if err := runValidate(ctx, validate, tx, cur.Revision, m, digest, changes); err != nil {
		return err
	}
	return s.finish(ctx, tx, m, digest, changes, true)
}

// ReplaceAll installs a snapshot: the follower path when the history it needs
// was compacted, or on first start. In one transaction it makes the content
// exactly snap.Objects at revision snap.Revision (which may be lower than the
// current one), after checking that they hash to snap.Digest (else a
// *DigestMismatchError and nothing is written). The changelog and the
// idempotency records are reset: Oldest becomes snap.Revision, so ChangesSince
// serves from there on. validate works as for Apply; its Pending.Changes is the
// difference between the old content and the snapshot.
func (s *Store) ReplaceAll(ctx context.Context, snap Snapshot, validate ValidateFunc) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	items, err := prepareObjects(snap.Objects)
	if err != nil {
		return err
	}
	sum, count := sumItems(newElemHasher(), items)
	digest := renderDigest(sum, count)
	if digest != snap.Digest {
		return &DigestMismatchError{Revision: snap.Revision, Want: snap.Digest, Got: digest}
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tx, cur, err := s.begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()

	// Merge the sorted snapshot with the sorted bucket to find the difference.
	type op struct {
		enc []byte
		ch  Change
	}
	var ops []op
	objs := tx.Bucket(bucketObjects)
	c := objs.Cursor()
	k, v := c.First()
	for i := 0; k != nil || i < len(items); {
		switch {
		case k != nil && (i == len(items) || bytes.Compare(k, items[i].enc) < 0):
			key, err := decodeKey(k, nil)
			if err != nil {
				return err
			}
			ops = append(ops, op{enc: bytes.Clone(k), ch: Change{Op: OpDelete, Key: key}})
			k, v = c.Next()
		case k == nil || bytes.Compare(k, items[i].enc) > 0:
			ops = append(ops, op{enc: items[i].enc, ch: Change{Op: OpUpsert, Key: items[i].key, Value: items[i].value}})
			i++
		default:
			if !bytes.Equal(v, items[i].value) {
				ops = append(ops, op{enc: items[i].enc, ch: Change{Op: OpUpsert, Key: items[i].key, Value: items[i].value}})
			}
			k, v = c.Next()
			i++
		}
	}
	diff := make([]Change, len(ops))
	for i, o := range ops {
		if o.ch.Op == OpDelete {
			err = objs.Delete(o.enc)
		} else {
			err = objs.Put(o.enc, o.ch.Value)
		}
		if err != nil {
			return fmt.Errorf("store: replace all: %s %s: %w", o.ch.Op, o.ch.Key, err)
		}
		diff[i] = o.ch
	}
	m := meta{rev: snap.Revision, sum: sum, count: count, oldest: snap.Revision, time: fromUnixNano(unixNano(snap.Time))}
	if err := runValidate(ctx, validate, tx, cur.Revision, m, digest, diff); err != nil {
		return err
	}
	for _, name := range [][]byte{bucketChangelog, bucketIdem, bucketIdemRev} {
		if err := tx.DeleteBucket(name); err != nil {
			return fmt.Errorf("store: replace all: %w", err)
		}
		if _, err := tx.CreateBucket(name); err != nil {
			return fmt.Errorf("store: replace all: %w", err)
		}
	}
	return s.finish(ctx, tx, m, digest, nil, false)
}

// begin starts the write transaction; called with writeMu held.
func (s *Store) begin() (*bolt.Tx, *state, error) {
	if s.closed.Load() {
		return nil, nil, ErrClosed
	}
	tx, err := s.db.Begin(true)
	if err != nil {
		if errors.Is(err, berrors.ErrDatabaseNotOpen) {
			return nil, nil, ErrClosed
		}
		return nil, nil, fmt.Errorf("store: begin: %w", err)
	}
	return tx, s.cur.Load(), nil
}

func (st *state) meta() meta {
	return meta{rev: st.Revision, sum: st.sum, count: uint64(st.Objects), oldest: st.Oldest, time: st.Time}
}

// finish records the changelog entry (when log is set) and compacts, writes
// meta, commits and publishes the new state. ctx is checked last: a write
// cancelled before this point is abandoned.
func (s *Store) finish(ctx context.Context, tx *bolt.Tx, m meta, digest string, changes []Change, log bool) error {
	if log {
		s.buf = appendEntry(s.buf[:0], digest, m.time, changes)
		if err := tx.Bucket(bucketChangelog).Put(be64(m.rev), s.buf); err != nil {
			return fmt.Errorf("store: changelog %d: %w", m.rev, err)
		}
		if err := s.compact(tx, &m); err != nil {
			return fmt.Errorf("store: compact: %w", err)
		}
	}
	if err := writeMeta(tx.Bucket(bucketMeta), m); err != nil {
		return fmt.Errorf("store: meta: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	err := tx.Commit()
	if cap(s.buf) > 4<<20 {
		s.buf = nil // do not pin the buffer of one huge batch
	}
	if err != nil {
		return fmt.Errorf("store: commit revision %d: %w", m.rev, err)
	}
	s.publish(m)
	return nil
}

// compact drops changelog entries older than the last KeepRevisions, and the
// idempotency records that refer to them, advancing m.oldest.
func (s *Store) compact(tx *bolt.Tx, m *meta) error {
	if m.rev > s.keep && m.rev-s.keep > m.oldest {
		m.oldest = m.rev - s.keep
	}
	c := tx.Bucket(bucketChangelog).Cursor()
	for k, _ := c.First(); k != nil && binary.BigEndian.Uint64(k) <= m.oldest; k, _ = c.First() {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	idem := tx.Bucket(bucketIdem)
	ic := tx.Bucket(bucketIdemRev).Cursor()
	for k, _ := ic.First(); k != nil && binary.BigEndian.Uint64(k[:8]) <= m.oldest; k, _ = ic.First() {
		if err := idem.Delete(bytes.Clone(k[8:])); err != nil {
			return err
		}
		if err := ic.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// putIdem records an idempotency key. The index key orders records for
// compaction: a committed record lives while its changelog entry does
// (revision > oldest), an unchanged one while its revision is resumable
// (revision >= oldest), hence revision+1 in its index key.
func putIdem(tx *bolt.Tx, key string, rec idemRecord) error {
	if err := tx.Bucket(bucketIdem).Put([]byte(key), rec.append(nil)); err != nil {
		return fmt.Errorf("store: idempotency record: %w", err)
	}
	at := rec.rev
	if rec.unchanged {
		at++
	}
	ik := append(be64(at), key...)
	if err := tx.Bucket(bucketIdemRev).Put(ik, []byte{}); err != nil {
		return fmt.Errorf("store: idempotency record: %w", err)
	}
	return nil
}

// replay rebuilds the original Commit of an idempotency record.
func replay(tx *bolt.Tx, v []byte) (Commit, error) {
	rec, err := decodeIdem(v)
	if err != nil {
		return Commit{}, err
	}
	c := Commit{Revision: rec.rev, Digest: rec.digest, Time: rec.time, Unchanged: rec.unchanged, Replayed: true}
	if !rec.unchanged {
		e := tx.Bucket(bucketChangelog).Get(be64(rec.rev))
		if e == nil {
			return Commit{}, fmt.Errorf("%w: idempotency record refers to revision %d, which has no changelog entry", ErrCorrupt, rec.rev)
		}
		cs, err := decodeEntry(rec.rev, e, interner{})
		if err != nil {
			return Commit{}, err
		}
		c.Changes = cs.Changes
	}
	return c, nil
}

func runValidate(ctx context.Context, validate ValidateFunc, tx *bolt.Tx, base uint64, m meta, digest string, changes []Change) error {
	if validate == nil {
		return nil
	}
	p := &Pending{tx: tx, base: base, rev: m.rev, digest: digest, count: int(m.count), changes: changes}
	err := validate(ctx, p)
	p.tx = nil
	if err != nil {
		return fmt.Errorf("%w: %w", ErrRejected, err)
	}
	return nil
}

// now is the commit time, at the precision it is persisted with.
func now() time.Time { return fromUnixNano(time.Now().UnixNano()) }
