package store

import (
	"errors"
	"fmt"
	"time"

	berrors "go.etcd.io/bbolt/errors"
)

// Sentinel errors. Every error the store returns for one of these conditions
// satisfies errors.Is with the matching sentinel; the revision-related ones are
// carried by a *RevisionError and digest mismatches by a *DigestMismatchError,
// which errors.As extracts for the details.
var (
	// ErrClosed is returned by every operation on a closed Store, and by Wait
	// when the store is closed while waiting.
	ErrClosed = errors.New("store: closed")

	// ErrConflict is returned by Apply when Batch.ExpectedRevision is non-zero
	// and differs from the current revision. Carried by a *RevisionError.
	ErrConflict = errors.New("store: revision conflict")

	// ErrCompacted is returned by ChangesSince when the history after the
	// requested revision is no longer retained; the caller must install a full
	// snapshot (List on the source, ReplaceAll on the replica). Carried by a
	// *RevisionError whose Oldest field is the oldest revision still resumable.
	ErrCompacted = errors.New("store: revision compacted")

	// ErrFutureRevision is returned by ChangesSince when the requested revision
	// is ahead of the store's current revision: the caller's history diverged
	// from this store and it must install a snapshot. Carried by a *RevisionError.
	ErrFutureRevision = errors.New("store: revision is ahead of the store")

	// ErrOutOfOrder is returned by ApplyChangeSet when the change set's revision
	// is not exactly the current revision plus one. Carried by a *RevisionError.
	ErrOutOfOrder = errors.New("store: change set out of order")

	// ErrDigestMismatch is returned by ApplyChangeSet and ReplaceAll when the
	// content they would produce does not have the expected digest; nothing is
	// written. Carried by a *DigestMismatchError.
	ErrDigestMismatch = errors.New("store: digest mismatch")

	// ErrInvalid is returned for invalid arguments: a malformed Key, an unknown
	// Op, an empty upsert value, a delete carrying a value, the same key twice in
	// one batch, change set or snapshot, or bad Options.
	ErrInvalid = errors.New("store: invalid argument")

	// ErrRejected is returned when a ValidateFunc refuses a write; the error
	// also wraps the ValidateFunc's own error, so errors.As reaches it.
	ErrRejected = errors.New("store: write rejected by validation")

	// ErrCorrupt is returned when persisted data fails to decode or when Verify
	// finds that the persisted digest, count or changelog disagree with the
	// content; by Open also when the file is not a bbolt database, or its
	// meta pages are damaged or of another bbolt version (the error wraps
	// bbolt's own as well).
	ErrCorrupt = errors.New("store: corrupt")

	// ErrLocked is returned by Open when another Store, in this process or
	// another, holds the file and did not release it within Options.Timeout
	// (a running server uses it). The error wraps bbolt's timeout as well.
	ErrLocked = errors.New("store: file is locked by another process")
)

// openError classifies an error of bbolt's Open: the callers of the store
// test for ErrLocked and ErrCorrupt, never for bbolt's errors (only the
// store imports bbolt). Both are wrapped, so errors.Is holds for either.
func openError(path string, timeout time.Duration, err error) error {
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return fmt.Errorf("store: open %s: %w (waited %v): %w", path, ErrLocked, timeout, err)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrVersionMismatch):
		return fmt.Errorf("store: open %s: %w: not a store file, or a damaged one: %w", path, ErrCorrupt, err)
	}
	return fmt.Errorf("store: open %s: %w", path, err)
}

// RevisionError carries the details of ErrConflict, ErrCompacted,
// ErrFutureRevision and ErrOutOfOrder; errors.Is(err, e.Err) holds.
type RevisionError struct {
	// Err is the sentinel: ErrConflict, ErrCompacted, ErrFutureRevision or ErrOutOfOrder.
	Err error
	// Current is the store's revision when the operation was refused.
	Current uint64
	// Requested is the revision the caller supplied: the expected revision
	// (ErrConflict), the revision to resume after (ErrCompacted,
	// ErrFutureRevision) or the change set's revision (ErrOutOfOrder).
	Requested uint64
	// Oldest is the oldest revision ChangesSince can resume after (ErrCompacted only).
	Oldest uint64
}

// Error describes the refusal with its revisions.
func (e *RevisionError) Error() string {
	switch e.Err {
	case ErrConflict:
		return fmt.Sprintf("%v: expected revision %d, current revision is %d", e.Err, e.Requested, e.Current)
	case ErrCompacted:
		return fmt.Sprintf("%v: changes after revision %d are no longer retained (oldest resumable revision %d, current %d)", e.Err, e.Requested, e.Oldest, e.Current)
	case ErrFutureRevision:
		return fmt.Sprintf("%v: revision %d is ahead of current revision %d", e.Err, e.Requested, e.Current)
	case ErrOutOfOrder:
		return fmt.Sprintf("%v: got revision %d, current revision is %d (want %d)", e.Err, e.Requested, e.Current, e.Current+1)
	}
	return fmt.Sprintf("%v: requested revision %d, current revision %d", e.Err, e.Requested, e.Current)
}

// Unwrap returns the sentinel, for errors.Is.
func (e *RevisionError) Unwrap() error { return e.Err }

// DigestMismatchError carries the details of ErrDigestMismatch.
type DigestMismatchError struct {
	// Revision is the revision being applied or installed.
	Revision uint64
	// Want is the digest the caller expected (from the primary).
	Want string
	// Got is the digest of the content the write would have produced.
	Got string
}

// Error describes the mismatch.
func (e *DigestMismatchError) Error() string {
	return fmt.Sprintf("%v at revision %d: expected %s, content hashes to %s", ErrDigestMismatch, e.Revision, e.Want, e.Got)
}

// Unwrap returns ErrDigestMismatch, for errors.Is.
func (e *DigestMismatchError) Unwrap() error { return ErrDigestMismatch }
