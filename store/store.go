package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Defaults for Options.
const (
	// DefaultKeepRevisions is the number of changelog entries retained when
	// Options.KeepRevisions is zero.
	DefaultKeepRevisions = 10000
	// DefaultTimeout is how long Open waits for the file lock when Options.Timeout is zero.
	DefaultTimeout = 5 * time.Second
	// MaxIdempotencyKeyLen is the maximum length in bytes of Batch.IdempotencyKey.
	MaxIdempotencyKeyLen = 1024
)

const formatVersion = 1

var (
	bucketMeta      = []byte("meta")
	bucketObjects   = []byte("objects")
	bucketChangelog = []byte("changelog")
	bucketIdem      = []byte("idem")    // idempotency key -> idemRecord
	bucketIdemRev   = []byte("idemrev") // be64(revision) || idempotency key -> empty; for compaction

	metaFormat   = []byte("format")
	metaRevision = []byte("revision")
	metaSum      = []byte("sum")
	metaCount    = []byte("count")
	metaOldest   = []byte("oldest")
	metaTime     = []byte("time")
)

// Op is the kind of a Change.
type Op uint8

const (
	// OpUpsert creates the object or replaces its value.
	OpUpsert Op = 1
	// OpDelete removes the object; deleting an absent object is a no-op.
	OpDelete Op = 2
)

// String returns "upsert", "delete" or "Op(n)".
func (o Op) String() string {
	switch o {
	case OpUpsert:
		return "upsert"
	case OpDelete:
		return "delete"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Object is a stored object: its key and its opaque value (the manifest as
// canonical JSON bytes; the store never interprets it). Values are never empty.
type Object struct {
	Key   Key
	Value []byte
}

// Change is one upsert or delete. Value is set for upserts and empty for deletes.
type Change struct {
	Op    Op
	Key   Key
	Value []byte
}

// Batch is one write: applied atomically in one bbolt transaction, producing
// exactly one new revision, or none when every change is a no-op (an upsert
// of identical bytes, a delete of an absent key).
//
// A key may appear at most once per batch; a batch naming a key twice is
// refused with ErrInvalid (to replace an object, upsert it).
// Values must not be modified until Apply returns.
type Batch struct {
	// Changes are the upserts and deletes, in any order.
	Changes []Change
	// ExpectedRevision, when non-zero, makes the batch apply only if the
	// current revision equals it; otherwise Apply fails with a *RevisionError
	// wrapping ErrConflict. Zero means no check (revision 0 cannot be asserted).
	ExpectedRevision uint64
	// IdempotencyKey, when non-empty and already recorded, makes Apply return
	// the original Commit (with Replayed set) without applying anything, even
	// if the batch differs. Records live as long as the changelog entry of their
	// revision (see Options.KeepRevisions), are local to this store (not
	// replicated through change sets) and are dropped by ReplaceAll.
	IdempotencyKey string
	// MinRevision, when greater than the current revision, makes the batch
	// commit at revision MinRevision instead of current+1, even when it
	// changes nothing (an empty change set). When that skips revisions, the
	// history before it is dropped (Oldest becomes MinRevision-1), so the
	// changelog stays contiguous and every follower resumes from a snapshot.
	// A primary starting a new term uses it to put its revisions above
	// anything an earlier primary could have produced. Zero, or a value at or
	// below the current revision, changes nothing.
	MinRevision uint64
}

// Commit is the result of Apply.
type Commit struct {
	// Revision is the new revision, or the current one when Unchanged.
	Revision uint64
	// Digest is the content digest at Revision.
	Digest string
	// Time is when Revision was committed (zero for revision 0).
	Time time.Time
	// Unchanged is true when the batch changed nothing and no revision was made.
	Unchanged bool
	// Replayed is true when the idempotency key was already recorded and this
	// is the original result; nothing was applied.
	Replayed bool
	// Changes are the effective changes, sorted by key (group, kind,
	// namespace, name); empty when Unchanged. Values share memory with the Batch.
	Changes []Change
}

// ChangeSet is one changelog entry: the effective changes that produced
// Revision from Revision-1, and the digest after them.
type ChangeSet struct {
	// Revision is the revision this change set produces.
	Revision uint64
	// Digest is the content digest at Revision.
	Digest string
	// Time is when the primary committed Revision (zero if unknown).
	Time time.Time
	// Changes are the effective changes, sorted by key.
	Changes []Change
}

// Snapshot is the whole content at one revision: returned by List, installed by ReplaceAll.
type Snapshot struct {
	// Revision is the revision of the content.
	Revision uint64
	// Digest is the content digest at Revision.
	Digest string
	// Time is when Revision was committed (zero if unknown).
	Time time.Time
	// Objects are every object, sorted by key (any order for ReplaceAll).
	Objects []Object
}

// Status describes the current revision; it is read from memory.
type Status struct {
	// Revision is the current revision; 0 for a store that was never written.
	Revision uint64
	// Digest is the content digest at Revision.
	Digest string
	// Objects is the number of stored objects.
	Objects int
	// Oldest is the oldest revision ChangesSince can resume after: history
	// from Oldest+1 to Revision is retained.
	Oldest uint64
	// Time is when Revision was committed (zero for revision 0 or if unknown).
	Time time.Time
}

// Options configure Open. The zero value is usable.
type Options struct {
	// KeepRevisions is how many changelog entries are retained; older ones are
	// compacted after each write. Zero means DefaultKeepRevisions; negative is invalid.
	KeepRevisions int
	// Timeout is how long Open waits for the file lock held by another
	// process. Zero means DefaultTimeout; negative means wait forever.
	Timeout time.Duration
	// NoSync skips fsync on commit: much faster, but a machine crash can lose
	// or corrupt committed revisions. For tests only.
	NoSync bool
	// VerifyOnOpen makes Open run Verify and fail if the store is inconsistent.
	VerifyOnOpen bool
}

// Store is a versioned object store in one bbolt file. It is safe for
// concurrent use; writes are serialized.
type Store struct {
	db   *bolt.DB
	path string
	keep uint64

	writeMu  sync.Mutex  // serializes writes; guards hasher and buf
	hasher   *elemHasher // object hashing on the write path
	buf      []byte      // changelog entry encoding buffer
	cur      atomic.Pointer[state]
	closed   atomic.Bool
	once     sync.Once
	closeErr error
}

// state is an immutable view of the current revision. next is closed when a
// newer state replaces it, or when the store closes.
type state struct {
	Status
	sum  sum256
	next chan struct{}
}

// meta is the persisted counterpart of state.
type meta struct {
	rev    uint64
	sum    sum256
	count  uint64
	oldest uint64
	time   time.Time
}

// Open opens or creates the store at path, creating its parent directory.
func Open(path string, opts Options) (*Store, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: empty path", ErrInvalid)
	}
	if opts.KeepRevisions < 0 {
		return nil, fmt.Errorf("%w: KeepRevisions %d is negative", ErrInvalid, opts.KeepRevisions)
	}
	keep := uint64(opts.KeepRevisions)
	if keep == 0 {
		keep = DefaultKeepRevisions
	}
	timeout := opts.Timeout
	switch {
	case timeout == 0:
		timeout = DefaultTimeout
	case timeout < 0:
		timeout = 0 // bbolt: wait forever
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:      timeout,
		NoSync:       opts.NoSync,
		FreelistType: bolt.FreelistMapType,
		// The freelist is rebuilt on open instead of written on every commit:
		// one fewer page write and sync per commit.
		NoFreelistSync:  true,
		InitialMmapSize: 64 << 20, // fewer remaps, so readers rarely block the writer
	})
	if err != nil {
		return nil, openError(path, timeout, err)
	}
	s := &Store{db: db, path: path, keep: keep, hasher: newElemHasher()}
	var m meta
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketObjects, bucketChangelog, bucketIdem, bucketIdemRev} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		mb := tx.Bucket(bucketMeta)
		if v := mb.Get(metaFormat); v == nil {
			m = meta{}
			if err := mb.Put(metaFormat, be64(formatVersion)); err != nil {
				return err
			}
			return writeMeta(mb, m)
		} else if len(v) != 8 || binary.BigEndian.Uint64(v) != formatVersion {
			return fmt.Errorf("%w: unsupported format %x", ErrCorrupt, v)
		}
		var err error
		m, err = readMeta(tx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, errors.Join(err, db.Close()))
	}
	s.cur.Store(&state{Status: m.status(), sum: m.sum, next: make(chan struct{})})
	if opts.VerifyOnOpen {
		if err := s.Verify(context.Background()); err != nil {
			return nil, fmt.Errorf("store: open %s: %w", path, errors.Join(err, db.Close()))
		}
	}
	return s, nil
}

func (m meta) status() Status {
	return Status{Revision: m.rev, Digest: renderDigest(m.sum, m.count), Objects: int(m.count), Oldest: m.oldest, Time: m.time}
}

func readMeta(tx *bolt.Tx) (meta, error) {
	mb := tx.Bucket(bucketMeta)
	u := func(name []byte) (uint64, error) {
		v := mb.Get(name)
		if len(v) != 8 {
			return 0, fmt.Errorf("%w: meta %s has %d bytes", ErrCorrupt, name, len(v))
		}
		return binary.BigEndian.Uint64(v), nil
	}
	var m meta
	var err error
	if m.rev, err = u(metaRevision); err != nil {
		return m, err
	}
	if m.count, err = u(metaCount); err != nil {
		return m, err
	}
	if m.oldest, err = u(metaOldest); err != nil {
		return m, err
	}
	t, err := u(metaTime)
	if err != nil {
		return m, err
	}
	m.time = fromUnixNano(int64(t))
	if m.sum, err = sumFromBytes(mb.Get(metaSum)); err != nil {
		return m, err
	}
	return m, nil
}

func writeMeta(mb *bolt.Bucket, m meta) error {
	sb := m.sum.bytes()
	for _, kv := range []struct{ k, v []byte }{
		{metaRevision, be64(m.rev)},
		{metaSum, sb[:]},
		{metaCount, be64(m.count)},
		{metaOldest, be64(m.oldest)},
		{metaTime, be64(uint64(unixNano(m.time)))},
	} {
		if err := mb.Put(kv.k, kv.v); err != nil {
			return err
		}
	}
	return nil
}

// Path returns the file the store was opened on.
func (s *Store) Path() string { return s.path }

// Close waits for in-flight operations, closes the file and wakes every Wait
// (which then fails with ErrClosed). Later calls return the first call's result.
func (s *Store) Close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		s.writeMu.Lock()
		defer s.writeMu.Unlock()
		s.closeErr = s.db.Close()
		close(s.cur.Load().next)
	})
	return s.closeErr
}

// Revision returns the current revision and digest, from memory.
func (s *Store) Revision() (uint64, string) {
	st := s.cur.Load()
	return st.Revision, st.Digest
}

// Status returns the current revision, digest, object count and retained history, from memory.
func (s *Store) Status() Status { return s.cur.Load().Status }

// Watch returns the current status and a channel that is closed as soon as
// the store moves past that status (a write commits) or closes. It is the
// cheap broadcast behind Wait: one channel per revision, shared by all watchers.
func (s *Store) Watch() (Status, <-chan struct{}) {
	st := s.cur.Load()
	return st.Status, st.next
}

// Wait blocks until the revision is at least rev, and returns the revision
// reached. If ctx ends first it returns the current revision and ctx.Err();
// if the store closes first, the current revision and ErrClosed.
func (s *Store) Wait(ctx context.Context, rev uint64) (uint64, error) {
	for {
		st := s.cur.Load()
		if st.Revision >= rev {
			return st.Revision, nil
		}
		if s.closed.Load() {
			return st.Revision, ErrClosed
		}
		select {
		case <-st.next:
		case <-ctx.Done():
			return s.cur.Load().Revision, ctx.Err()
		}
	}
}

// publish makes next current and wakes the watchers of the previous state.
// Called with writeMu held, after the transaction committed.
func (s *Store) publish(m meta) {
	next := &state{Status: m.status(), sum: m.sum, next: make(chan struct{})}
	prev := s.cur.Swap(next)
	close(prev.next)
}

// view runs fn in a read transaction, mapping a closed database to ErrClosed.
func (s *Store) view(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.db.View(fn)
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return ErrClosed
	}
	return err
}

// Get returns the object stored under k, if any.
func (s *Store) Get(ctx context.Context, k Key) (Object, bool, error) {
	if err := k.Validate(); err != nil {
		return Object{}, false, err
	}
	enc := appendKey(nil, k)
	var obj Object
	var found bool
	err := s.view(ctx, func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketObjects).Get(enc); v != nil {
			obj, found = Object{Key: k, Value: bytes.Clone(v)}, true
		}
		return nil
	})
	return obj, found, err
}

// List returns every object, sorted by key, with the revision and digest
// they belong to, read in one short read transaction.
func (s *Store) List(ctx context.Context) (Snapshot, error) {
	var snap Snapshot
	err := s.view(ctx, func(tx *bolt.Tx) error {
		m, err := readMeta(tx)
		if err != nil {
			return err
		}
		snap = Snapshot{Revision: m.rev, Digest: renderDigest(m.sum, m.count), Time: m.time}
		snap.Objects = make([]Object, 0, m.count)
		in := interner{}
		var slab []byte // values are carved from shared chunks: few allocations
		c := tx.Bucket(bucketObjects).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			key, err := decodeKey(k, in)
			if err != nil {
				return err
			}
			if len(v) > cap(slab)-len(slab) {
				slab = make([]byte, 0, max(256<<10, len(v)))
			}
			start := len(slab)
			slab = append(slab, v...)
			snap.Objects = append(snap.Objects, Object{Key: key, Value: slab[start:len(slab):len(slab)]})
			if len(snap.Objects)%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return Snapshot{}, err
	}
	return snap, nil
}

// ChangesSince returns the change sets with Revision > rev, in revision
// order, at most limit of them (limit <= 0: all; pass a limit to keep the read
// transaction short). It returns an empty slice when rev is the current
// revision, a *RevisionError wrapping ErrCompacted when the entries after rev
// were compacted, and one wrapping ErrFutureRevision when rev is ahead of the
// store; in both cases the caller needs a snapshot.
func (s *Store) ChangesSince(ctx context.Context, rev uint64, limit int) ([]ChangeSet, error) {
	var out []ChangeSet
	err := s.view(ctx, func(tx *bolt.Tx) error {
		m, err := readMeta(tx)
		if err != nil {
			return err
		}
		if rev < m.oldest {
			return &RevisionError{Err: ErrCompacted, Current: m.rev, Requested: rev, Oldest: m.oldest}
		}
		if rev > m.rev {
			return &RevisionError{Err: ErrFutureRevision, Current: m.rev, Requested: rev}
		}
		n := m.rev - rev
		if limit > 0 && uint64(limit) < n {
			n = uint64(limit)
		}
		out = make([]ChangeSet, 0, n)
		in := interner{}
		c := tx.Bucket(bucketChangelog).Cursor()
		want := rev + 1
		for k, v := c.Seek(be64(want)); k != nil && uint64(len(out)) < n; k, v = c.Next() {
			if len(k) != 8 || binary.BigEndian.Uint64(k) != want {
				return fmt.Errorf("%w: changelog has revision %x where %d was expected", ErrCorrupt, k, want)
			}
			cs, err := decodeEntry(want, v, in)
			if err != nil {
				return err
			}
			out = append(out, cs)
			want++
		}
		if uint64(len(out)) != n {
			return fmt.Errorf("%w: changelog ends at revision %d, want %d", ErrCorrupt, want-1, rev+n)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Verify recomputes the digest and object count from the content and checks
// them, and the changelog's continuity and last digest, against the persisted
// meta and the in-memory status. Inconsistencies wrap ErrCorrupt.
func (s *Store) Verify(ctx context.Context) error {
	return s.view(ctx, func(tx *bolt.Tx) error {
		m, err := readMeta(tx)
		if err != nil {
			return err
		}
		h := newElemHasher()
		in := interner{}
		var sum sum256
		var count uint64
		c := tx.Bucket(bucketObjects).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if _, err := decodeKey(k, in); err != nil {
				return err
			}
			if len(v) == 0 {
				return fmt.Errorf("%w: object %q has an empty value", ErrCorrupt, k)
			}
			e := h.hash(k, v)
			sum.add(&e)
			count++
			if count%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
		}
		want := renderDigest(m.sum, m.count)
		if got := renderDigest(sum, count); got != want || count != m.count {
			return fmt.Errorf("%w: content hashes to %s over %d objects, meta records %s over %d", ErrCorrupt, got, count, want, m.count)
		}
		if m.oldest > m.rev {
			return fmt.Errorf("%w: oldest retained revision %d is after current revision %d", ErrCorrupt, m.oldest, m.rev)
		}
		cl := tx.Bucket(bucketChangelog).Cursor()
		next := m.oldest + 1
		var last []byte
		for k, v := cl.First(); k != nil; k, v = cl.Next() {
			if len(k) != 8 || binary.BigEndian.Uint64(k) != next {
				return fmt.Errorf("%w: changelog key %x where revision %d was expected", ErrCorrupt, k, next)
			}
			next++
			last = v
		}
		if next-1 != m.rev {
			return fmt.Errorf("%w: changelog ends at revision %d, current revision is %d", ErrCorrupt, next-1, m.rev)
		}
		if last != nil {
			cs, err := decodeEntry(m.rev, last, nil)
			if err != nil {
				return err
			}
			if cs.Digest != want {
				return fmt.Errorf("%w: last changelog entry (revision %d) records digest %s, meta %s", ErrCorrupt, m.rev, cs.Digest, want)
			}
		}
		// A write may commit while this transaction runs, so memory can be
		// ahead of (or, until it publishes, behind) what this transaction sees;
		// compare only at the same revision.
		if st := s.cur.Load(); st.Revision == m.rev && (st.Digest != want || st.Objects != int(m.count) || st.Oldest != m.oldest) {
			return fmt.Errorf("%w: in-memory revision %d %s, persisted %d %s", ErrCorrupt, st.Revision, st.Digest, m.rev, want)
		}
		return nil
	})
}

// Backup writes a consistent copy of the database file to w, through one read
// transaction (bbolt Tx.WriteTo), and returns the bytes written. The read
// transaction lasts as long as writing to w does, so prefer a fast local w;
// cancelling ctx aborts the copy at the next write.
func (s *Store) Backup(ctx context.Context, w io.Writer) (int64, error) {
	var n int64
	err := s.view(ctx, func(tx *bolt.Tx) error {
		var err error
		n, err = tx.WriteTo(ctxWriter{ctx: ctx, w: w})
		return err
	})
	return n, err
}

type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}
