package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/store"
)

// adminService implements AdminService.
type adminService struct {
	arbiterv1.UnimplementedAdminServiceServer
	s *Server
}

// backupChunk is the size of one BackupResponse.
const backupChunk = 1 << 20

// Backup implements AdminService.Backup. The store is first copied through
// one read transaction into a file beside it (fast, so the transaction is
// short and writers are not held up by a slow client), the copy is verified
// (its digest recomputed from its content), then streamed.
func (a *adminService) Backup(_ *arbiterv1.BackupRequest, stream arbiterv1.AdminService_BackupServer) error {
	ctx := stream.Context()
	s := a.s
	tmp, err := os.CreateTemp(s.cfg.DataDir, ".backup-*.db")
	if err != nil {
		return toStatus(fmt.Errorf("backup: %w", err))
	}
	// A scratch copy, only streamed once written: nothing to report.
	defer func() { _ = os.Remove(tmp.Name()) }()
	defer func() { _ = tmp.Close() }()
	if _, err := s.store.Backup(ctx, tmp); err != nil {
		return toStatus(fmt.Errorf("backup: %w", err))
	}
	if err := tmp.Sync(); err != nil {
		return toStatus(fmt.Errorf("backup: %w", err))
	}
	st, err := InspectStoreFile(tmp.Name())
	if err != nil {
		return toStatus(fmt.Errorf("backup: the copy does not verify: %w", err))
	}
	size, err := tmp.Seek(0, io.SeekEnd)
	if err != nil {
		return toStatus(err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return toStatus(err)
	}
	s.log.Info("backup", "revision", st.Revision, "digest", st.Digest, "bytes", size)
	buf := make([]byte, backupChunk)
	first := true
	for {
		n, err := io.ReadFull(tmp, buf)
		if n > 0 || first {
			m := &arbiterv1.BackupResponse{Data: buf[:n]}
			if first {
				m.Revision, m.Digest, m.Size = st.Revision, st.Digest, uint64(size)
				first = false
			}
			if serr := stream.Send(m); serr != nil {
				return serr
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil
		}
		if err != nil {
			return toStatus(err)
		}
	}
}

// InspectStoreFile opens a store file that no server is using, verifies it
// (its digest and object count recomputed from its content, its changelog
// continuous) and returns its status.
func InspectStoreFile(path string) (store.Status, error) {
	st, err := store.Open(path, store.Options{VerifyOnOpen: true, NoSync: true})
	if err != nil {
		return store.Status{}, err
	}
	// Only read, and bbolt writes at commit: its Close loses nothing.
	defer func() { _ = st.Close() }()
	return st.Status(), nil
}

// BackupDir copies the store in dataDir, which no server may be using (for
// a running one, AdminService.Backup), to w; it returns the copy's status
// and size.
func BackupDir(ctx context.Context, dataDir string, w io.Writer) (store.Status, int64, error) {
	st, err := store.Open(filepath.Join(dataDir, "arbiter.db"), store.Options{Timeout: 500 * time.Millisecond})
	if err != nil {
		return store.Status{}, 0, fmt.Errorf("%v (for a running server, use --server)", err)
	}
	n, err := st.Backup(ctx, w)
	status := st.Status()
	_ = st.Close() // only read, and bbolt writes at commit: nothing lost
	return status, n, err
}

// ErrStoreInUse is a restore into a data directory whose store is open.
var ErrStoreInUse = errors.New("a server is using the store: stop it before restoring")

// ErrStoreExists is a restore over an existing store without force.
var ErrStoreExists = errors.New("the data directory already holds a store")

// VerifyFunc verifies a store file that no server uses and returns its status.
type VerifyFunc func(path string) (store.Status, error)

// RestoreFile installs the store file backup (made by Backup or `arbiter
// backup`) as DIR/arbiter.db. The copy is verified first with verify (nil:
// InspectStoreFile in this process); nothing in dataDir changes when it does
// not verify. An existing store is replaced only with force, and is kept as
// arbiter.db.pre-restore-UNIXTIME (returned as old). The store must not be
// in use: restore into the data directory of a stopped server.
//
// bbolt panics (in a goroutine of its own, so the panic cannot be
// recovered) when it opens some damaged files; a caller that must survive
// a damaged backup verifies it in a child process (arbiter restore does).
func RestoreFile(backup, dataDir string, force bool, verify VerifyFunc) (st store.Status, old string, err error) {
	if verify == nil {
		verify = InspectStoreFile
	}
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return st, "", err
	}
	target := filepath.Join(dataDir, "arbiter.db")
	if _, err := os.Stat(target); err == nil {
		cur, err := store.Open(target, store.Options{Timeout: 200 * time.Millisecond, NoSync: true})
		if err != nil {
			if errors.Is(err, store.ErrLocked) {
				return st, "", fmt.Errorf("%s: %w", target, ErrStoreInUse)
			}
			if !force {
				return st, "", fmt.Errorf("%s does not open (%v): %w; --force replaces it", target, err, ErrStoreExists)
			}
		} else {
			cs := cur.Status()
			_ = cur.Close() // only read, and bbolt writes at commit: nothing lost
			if !force {
				return st, "", fmt.Errorf("%s (revision %d, %s): %w; --force replaces it", target, cs.Revision, cs.Digest, ErrStoreExists)
			}
		}
	}
	in, err := os.Open(backup)
	if err != nil {
		return st, "", err
	}
	defer func() { _ = in.Close() }() // only read
	tmp, err := os.CreateTemp(dataDir, ".restore-*.db")
	if err != nil {
		return st, "", err
	}
	// Once renamed into place, its name is gone; before, it is discarded
	// (with the error that stopped the restore).
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := io.Copy(tmp, in); err != nil {
		_ = tmp.Close()
		return st, "", err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return st, "", err
	}
	if err := tmp.Close(); err != nil {
		return st, "", err
	}
	st, err = verify(tmp.Name())
	if err != nil {
		return st, "", fmt.Errorf("%s is not a good store file: %w", backup, err)
	}
	if _, err := os.Stat(target); err == nil {
		old = fmt.Sprintf("%s.pre-restore-%d", target, time.Now().Unix())
		if err := os.Rename(target, old); err != nil {
			return st, "", err
		}
	}
	if err := os.Rename(tmp.Name(), target); err != nil {
		return st, old, err
	}
	if d, err := os.Open(dataDir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return st, old, nil
}
