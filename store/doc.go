// Package store is Arbiter's versioned object store: the one source of truth
// of a replica, in a single bbolt file. It stores opaque typed objects
// (policies, exceptions, bindings, params, namespaces, exemptions as canonical
// JSON) and knows nothing of what they mean.
//
// # Revisions
//
// Every write is one bbolt transaction that applies a batch of upserts and
// deletes and produces revision N+1 with the digest of the whole content at
// N+1 and a changelog entry, all persisted together. An empty store is at
// revision 0. A batch that changes nothing produces no revision (unless its
// MinRevision asks for one: a primary starting a new term jumps to a revision
// above any earlier term's, dropping the history before it). Writes are
// serialized; reads (List, Get, ChangesSince) use short read transactions and
// copy everything they return out of bbolt's memory.
//
// Primaries write with Apply; a ValidateFunc lets the caller compile the
// would-be state inside the write transaction and refuse the write, leaving
// the store unchanged. Followers replay the primary's change sets with
// ApplyChangeSet, or install a Snapshot (List on the primary) with ReplaceAll
// when the history they need was compacted. Wait and Watch let readers block
// until a revision is reached.
//
// # Digest
//
// The digest identifies the content, independently of insertion order and
// revision history: two stores holding the same objects have the same digest
// on every machine. It is an additive multiset hash, updated incrementally so
// that a one-object write costs two SHA-256 computations, whatever the size
// of the store:
//
//	encKey(o)   = group 0x00 kind 0x00 namespace 0x00 name   (no part contains NUL)
//	h(o)        = SHA-256("arbiter.store.object.v1\x00" || uint32be(len(encKey(o))) || encKey(o) || value(o))
//	S           = Σ h(o) over all objects, each read as a 256-bit big-endian integer, mod 2^256
//	digest      = "sha256:" || hex(SHA-256("arbiter.store.digest.v1\x00" || uint64be(count) || S as 32 big-endian bytes))
//
// S and count are persisted in the meta bucket; an upsert subtracts the old
// object's hash and adds the new one, a delete subtracts. The empty store's
// digest is EmptyDigest. ComputeDigest computes the digest of any object set;
// Verify recomputes it from the content. The digest detects divergence between
// replicas fed the same changes; it is not meant to resist an adversary who
// chooses object contents to forge collisions (additive hashes over many
// elements are weaker than SHA-256 itself), and writers are trusted anyway.
//
// # Layout
//
// Buckets: "objects" (encKey → value), "changelog" (uint64be revision →
// entry: commit time, digest, effective changes with full values), "meta"
// (format, revision, S, count, oldest, time), "idem" and "idemrev"
// (idempotency records and their compaction index). After each write the
// changelog keeps its last Options.KeepRevisions entries; meta's oldest is
// the oldest revision ChangesSince can resume after.
package store
