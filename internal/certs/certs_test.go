package certs_test

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/arbiter-pdp/arbiter/internal/certs"
	"github.com/arbiter-pdp/arbiter/internal/certs/certstest"
)

func TestReloadKeepsLastGood(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "ca")
	leaf := ca.Issue(t, "srv", certstest.Spec{CommonName: "one", DNSNames: []string{"localhost"}})
	var logs bytes.Buffer
	now := time.Unix(1000, 0)
	r, err := certs.New(certs.Files{Cert: leaf.CertFile, Key: leaf.KeyFile, CA: ca.File},
		certs.Options{Interval: time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := r.ServerConfig(0)
	if err != nil {
		t.Fatal(err)
	}
	serving := func() string {
		c, err := cfg.GetConfigForClient(nil)
		if err != nil {
			t.Fatal(err)
		}
		return c.Certificates[0].Leaf.Subject.CommonName
	}
	if got := serving(); got != "one" {
		t.Fatalf("serving %s", got)
	}
	// A half-written rotation (new key, old certificate) does not load:
	// the old pair stays.
	two := ca.Make(t, certstest.Spec{CommonName: "two", DNSNames: []string{"localhost"}})
	if err := os.WriteFile(leaf.KeyFile, two.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Second)
	if got := serving(); got != "one" {
		t.Fatalf("after a half rotation serving %s", got)
	}
	if !bytes.Contains(logs.Bytes(), []byte("do not load")) {
		t.Fatalf("the failed reload was not logged: %s", logs.String())
	}
	// Within the interval nothing is re-read.
	if err := os.WriteFile(leaf.CertFile, two.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := serving(); got != "one" {
		t.Fatalf("re-read within the interval: %s", got)
	}
	now = now.Add(2 * time.Second)
	if got := serving(); got != "two" {
		t.Fatalf("after the rotation serving %s", got)
	}
	if r.Reloads() != 1 {
		t.Fatalf("%d reloads", r.Reloads())
	}
	// A deleted file keeps the last good material.
	os.Remove(leaf.CertFile)
	now = now.Add(2 * time.Second)
	if got := serving(); got != "two" {
		t.Fatalf("after deletion serving %s", got)
	}
}

func TestNewRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "ca")
	leaf := ca.Issue(t, "srv", certstest.Spec{CommonName: "x"})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for name, f := range map[string]certs.Files{
		"cert without key": {Cert: leaf.CertFile},
		"missing file":     {Cert: leaf.CertFile, Key: dir + "/nope"},
		"key as CA":        {CA: leaf.KeyFile},
		"swapped":          {Cert: leaf.KeyFile, Key: leaf.CertFile},
	} {
		if _, err := certs.New(f, certs.Options{Logger: quiet}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
