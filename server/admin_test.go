package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/arbiter-pdp/arbiter/server"
	"github.com/arbiter-pdp/arbiter/store"
)

// TestBackupThenRestoreSameDigest backs a primary up over gRPC while writes
// go on, restores the copy into a new data directory, and starts a server
// on it: same revision, same digest, same decisions.
func TestBackupThenRestoreSameDigest(t *testing.T) {
	ts := startSyncedServer(t, server.Config{})
	ctx := context.Background()
	if _, err := ts.LoadObjects(ctx, readObjects(t, pssDir, writeFixture(t, exceptionFixture))); err != nil {
		t.Fatal(err)
	}
	// Writes keep coming while backups are taken.
	stop := make(chan struct{})
	var writes atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := ts.c.Write(ctx, upserts(namespaceJSON(fmt.Sprintf("ns-%d", i%50), i))); err != nil {
				t.Error(err)
				return
			}
			writes.Add(1)
		}
	}()
	var buf bytes.Buffer
	var info struct {
		rev    uint64
		digest string
	}
	for i := 0; i < 3; i++ {
		buf.Reset()
		bi, err := ts.c.Backup(ctx, &buf)
		if err != nil {
			t.Fatal(err)
		}
		info.rev, info.digest = bi.Revision, bi.Digest
	}
	close(stop)
	wg.Wait()
	if writes.Load() == 0 {
		t.Fatal("no writes during the backups")
	}
	if info.rev < 1 || info.digest == "" {
		t.Fatalf("backup of revision %d digest %q", info.rev, info.digest)
	}
	file := filepath.Join(t.TempDir(), "backup.db")
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	st, old, err := server.RestoreFile(file, dir, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Revision != info.rev || st.Digest != info.digest || old != "" {
		t.Fatalf("restored revision %d %s (old %q), backup said %d %s", st.Revision, st.Digest, old, info.rev, info.digest)
	}
	restored := startServer(t, server.Config{DataDir: dir})
	status, err := restored.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if status.GetRevision() != info.rev || status.GetDigest() != info.digest {
		t.Fatalf("restored server at %d %s, backup %d %s", status.GetRevision(), status.GetDigest(), info.rev, info.digest)
	}
	// A fresh backup of the primary, restored, gives the primary's digest.
	buf.Reset()
	bi, err := ts.c.Backup(ctx, &buf)
	if err != nil {
		t.Fatal(err)
	}
	cur := ts.Current()
	if bi.Revision != cur.Revision || bi.Digest != cur.Digest {
		t.Fatalf("idle backup %d %s, primary at %d %s", bi.Revision, bi.Digest, cur.Revision, cur.Digest)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	dir2 := t.TempDir()
	if _, _, err := server.RestoreFile(file, dir2, false, nil); err != nil {
		t.Fatal(err)
	}
	again := startServer(t, server.Config{DataDir: dir2})
	if got := again.Current(); got.Revision != cur.Revision || got.Digest != cur.Digest {
		t.Fatalf("restored %d %s, primary %d %s", got.Revision, got.Digest, cur.Revision, cur.Digest)
	}
	for _, name := range []string{"granted", "refused", "other"} {
		a, err := ts.c.Decide(ctx, plainPod(name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := again.c.Decide(ctx, plainPod(name))
		if err != nil {
			t.Fatal(err)
		}
		if render(a) != render(b) {
			t.Fatalf("%s: primary %s\nrestored %s", name, render(a), render(b))
		}
	}
}

func TestRestoreRefusals(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	if _, err := ts.LoadObjects(ctx, readObjects(t, pssDir)); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := ts.c.Backup(ctx, &buf); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "backup.db")
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	// Into the data directory of a running server: refused.
	if _, _, err := server.RestoreFile(file, ts.dir, true, nil); !errors.Is(err, server.ErrStoreInUse) {
		t.Fatalf("restore into a running server's directory: %v", err)
	}
	// Over an existing store without force: refused; with force: the old
	// one is kept.
	dir := t.TempDir()
	if _, _, err := server.RestoreFile(file, dir, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := server.RestoreFile(file, dir, false, nil); !errors.Is(err, server.ErrStoreExists) {
		t.Fatalf("restore over a store without force: %v", err)
	}
	_, old, err := server.RestoreFile(file, dir, true, nil)
	if err != nil || old == "" {
		t.Fatalf("forced restore: old=%q err=%v", old, err)
	}
	if _, err := os.Stat(old); err != nil {
		t.Fatal(err)
	}
	// A damaged file is refused and the directory untouched.
	bad := filepath.Join(t.TempDir(), "bad.db")
	b := append([]byte(nil), buf.Bytes()...)
	for i := 4096; i < len(b); i += 97 {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(bad, b, 0o600); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	if _, _, err := server.RestoreFile(bad, empty, false, verifyInChild); err == nil {
		t.Fatal("a damaged file was restored")
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Fatalf("a refused restore left files: %v", entries)
	}
}

// verifyInChild verifies a store file in a child process (this test binary
// running TestVerifyStoreFileHelper), as arbiter restore does: bbolt may
// panic on a damaged file.
func verifyInChild(path string) (store.Status, error) {
	var st store.Status
	cmd := exec.Command(os.Args[0], "-test.run=^TestVerifyStoreFileHelper$")
	cmd.Env = append(os.Environ(), "ARBITER_VERIFY_STORE_FILE="+path)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg, _, _ := strings.Cut(strings.TrimSpace(errb.String()+out.String()), "\n")
		return st, fmt.Errorf("verification failed: %s", msg)
	}
	line := out.String()
	i := strings.Index(line, "{")
	if i < 0 {
		return st, fmt.Errorf("verification printed nothing")
	}
	dec := json.NewDecoder(strings.NewReader(line[i:]))
	return st, dec.Decode(&st)
}

func TestVerifyStoreFileHelper(t *testing.T) {
	path := os.Getenv("ARBITER_VERIFY_STORE_FILE")
	if path == "" {
		t.Skip("helper process for verifyInChild")
	}
	st, err := server.InspectStoreFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	b, _ := json.Marshal(st)
	fmt.Println(string(b))
}
