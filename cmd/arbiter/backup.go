package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/arbiter-pdp/arbiter/client"
	"github.com/arbiter-pdp/arbiter/internal/textout"
	"github.com/arbiter-pdp/arbiter/server"
	"github.com/arbiter-pdp/arbiter/store"
)

func newBackupCommand() *cobra.Command {
	var (
		addr, data, out, format string
		timeout                 time.Duration
	)
	cmd := &cobra.Command{
		Use:   "backup (--server ADDR | --data DIR) -o FILE",
		Short: "Copy a server's bbolt store to a file, while it serves",
		Long: `Copy the store of the server at ADDR (AdminService.Backup: a consistent copy
through one read transaction, verified, while the server keeps serving; the
caller needs the replicate role) or, for a stopped server, of the store in DIR,
to FILE ("-": standard output). Prints the revision and digest of the copy.
Restore it with arbiter restore.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (addr == "") == (data == "") {
				return exitWith(exitLoad, "give one of --server and --data")
			}
			if out == "" {
				return exitWith(exitLoad, "-o FILE is required")
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			return runBackup(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), addr, data, out, format)
		},
	}
	cmd.Flags().StringVar(&addr, "server", "", "address of the replica to back up")
	cmd.Flags().StringVar(&data, "data", "", "data directory of a stopped server to back up")
	cmd.Flags().StringVarP(&out, "output", "o", "", "file to write (- for standard output)")
	cmd.Flags().StringVar(&format, "format", "text", "summary format: text or json")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "deadline of the backup")
	return cmd
}

type backupSummary struct {
	Revision uint64 `json:"revision"`
	Digest   string `json:"digest"`
	Bytes    int64  `json:"bytes"`
	File     string `json:"file,omitempty"`
	Replaced string `json:"replaced,omitempty"`
}

func runBackup(ctx context.Context, stdout, stderr io.Writer, addr, data, out, format string) error {
	var w io.Writer
	var tmp *os.File
	if out == "-" {
		w = stdout
		stdout = stderr // the summary must not mix with the file
	} else {
		var err error
		tmp, err = os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
		if err != nil {
			return exitWith(exitLoad, "%v", err)
		}
		// Once renamed into place, tmp is closed and its name is gone;
		// before, it is discarded: there is nothing to report either way.
		defer func() { _ = os.Remove(tmp.Name()) }()
		defer func() { _ = tmp.Close() }()
		w = tmp
	}
	var sum backupSummary
	if addr != "" {
		c, err := dialServer(ctx, addr)
		if err != nil {
			return exitWith(exitLoad, "%v", err)
		}
		defer c.Close()
		info, err := c.Backup(ctx, w)
		if err != nil {
			return exitWith(exitLoad, "backup: %s", client.Describe(err))
		}
		sum = backupSummary{Revision: info.Revision, Digest: info.Digest, Bytes: info.Bytes}
	} else {
		status, n, err := server.BackupDir(ctx, data, w)
		if err != nil {
			return exitWith(exitLoad, "backup: %v", err)
		}
		sum = backupSummary{Revision: status.Revision, Digest: status.Digest, Bytes: n}
	}
	if tmp != nil {
		if err := tmp.Sync(); err != nil {
			return exitWith(exitLoad, "backup: %v", err)
		}
		if err := tmp.Close(); err != nil {
			return exitWith(exitLoad, "backup: %v", err)
		}
		if err := os.Rename(tmp.Name(), out); err != nil {
			return exitWith(exitLoad, "backup: %v", err)
		}
		sum.File = out
	}
	return printSummary(stdout, format, sum)
}

func printSummary(w io.Writer, format string, s backupSummary) error {
	if format == "json" {
		return json.NewEncoder(w).Encode(s)
	}
	text := textout.New(w)
	text.Printf("revision: %d\ndigest: %s\nbytes: %d\n", s.Revision, s.Digest, s.Bytes)
	if s.File != "" {
		text.Printf("file: %s\n", s.File)
	}
	if s.Replaced != "" {
		text.Printf("previous store kept as: %s\n", s.Replaced)
	}
	return text.Err()
}

func newRestoreCommand() *cobra.Command {
	var (
		data, format string
		force        bool
		verifyOnly   bool
	)
	cmd := &cobra.Command{
		Use:   "restore --data DIR FILE",
		Short: "Install a backup as the store of a stopped server",
		Long: `Install FILE (made by arbiter backup) as DIR/arbiter.db. The file is verified
first (its digest recomputed from its content, its changelog checked); the
server using DIR must be stopped. An existing store is replaced only with
--force, and kept beside it as arbiter.db.pre-restore-UNIXTIME. Prints the
revision and digest restored: start the server on DIR and arbiter status shows
the same. Followers of a restored primary resynchronise from a snapshot.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if verifyOnly {
				st, err := server.InspectStoreFile(args[0])
				if err != nil {
					return exitWith(exitLoad, "%v", err)
				}
				return json.NewEncoder(cmd.OutOrStdout()).Encode(st)
			}
			if data == "" {
				return exitWith(exitLoad, "--data DIR is required")
			}
			st, old, err := server.RestoreFile(args[0], data, force, verifyInChild)
			if err != nil {
				return exitWith(exitLoad, "restore: %v", err)
			}
			fi, _ := os.Stat(filepath.Join(data, "arbiter.db"))
			var n int64
			if fi != nil {
				n = fi.Size()
			}
			return printSummary(cmd.OutOrStdout(), format, backupSummary{Revision: st.Revision, Digest: st.Digest, Bytes: n,
				File: filepath.Join(data, "arbiter.db"), Replaced: old})
		},
	}
	cmd.Flags().StringVar(&data, "data", "", "data directory of the stopped server")
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing store (kept as arbiter.db.pre-restore-UNIXTIME)")
	cmd.Flags().StringVar(&format, "format", "text", "summary format: text or json")
	cmd.Flags().BoolVar(&verifyOnly, "verify-only", false, "verify FILE and print its status as JSON (used by restore itself)")
	_ = cmd.Flags().MarkHidden("verify-only")
	return cmd
}

// verifyInChild verifies a store file in a child process (arbiter restore
// --verify-only): bbolt panics, unrecoverably, on some damaged files, and a
// damaged backup must give a clear error, not a crash.
func verifyInChild(path string) (store.Status, error) {
	var st store.Status
	self, err := os.Executable()
	if err != nil {
		return server.InspectStoreFile(path)
	}
	cmd := exec.Command(self, "restore", "--verify-only", path)
	// Tells a test binary (TestMain) to behave as arbiter.
	cmd.Env = append(os.Environ(), "ARBITER_RUN_MAIN=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		msg, _, _ = strings.Cut(msg, "\n")
		if clean, ok := strings.CutPrefix(msg, "error: "); ok {
			return st, errors.New(clean)
		}
		if msg == "" {
			msg = err.Error()
		}
		return st, fmt.Errorf("the file is damaged: reading it crashed bbolt (%s)", msg)
	}
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		return st, fmt.Errorf("verifying: %v", err)
	}
	return st, nil
}
