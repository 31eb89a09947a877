package e2e

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The three workload manifests of ../shared/bench/workload/pods (a compliant
// Pod, a violating Pod, a violating Deployment), where the kyverno-oracle
// baseline was measured.
const benchWorkload = "../../shared/bench/workload"

// writeManifests writes n manifests, cycling through the workload's pods
// with distinct names, to one multi-document file.
func writeManifests(b *testing.B, n int) string {
	b.Helper()
	var docs [][]byte
	for _, f := range []string{"compliant-pod.yaml", "violating-pod.yaml", "violating-deployment.yaml"} {
		raw, err := os.ReadFile(filepath.Join(benchWorkload, "pods", f))
		if err != nil {
			b.Skipf("the benchmark workload is not beside the checkout: %v", err)
		}
		docs = append(docs, raw)
	}
	var buf bytes.Buffer
	for i := range n {
		d := docs[i%len(docs)]
		// Unique names: "name: X" of metadata is the first "name: " line.
		idx := bytes.Index(d, []byte("\n  name: "))
		end := idx + bytes.IndexByte(d[idx+1:], '\n') + 1
		fmt.Fprintf(&buf, "---\n%s\n  name: m%05d%s\n", d[:idx], i, d[end:])
	}
	path := filepath.Join(b.TempDir(), "manifests.yaml")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkApply10k: 10,000 manifests × the 16 Pod Security policies of
// deploy/examples/pod-security through `arbiter apply --server` (one
// DecideStream to a server on loopback) and through local `arbiter apply`,
// whole process runs (reading, decoding, evaluating, writing the JSON
// PolicyReports). manifests/s is the figure to compare with
// kyverno-oracle's per-resource time on the same three manifests.
func BenchmarkApply10k(b *testing.B) {
	const n = 10_000
	manifests := writeManifests(b, n)
	policies := "../deploy/examples/pod-security"
	// The ten MutatingPolicies of the engine's mutation benchmark (labels,
	// annotations, defaulted security contexts, a volume), run before the
	// Pod Security policies; -o json then writes each mutated resource too.
	mutations := "../engine/testdata/bench/mutating"
	primary := startPrimary(b, "--load", policies, "--log-level", "warn")
	mutating := startPrimary(b, "--load", policies, "--load", mutations, "--log-level", "warn")
	for _, c := range []struct {
		name   string
		args   []string
		server *proc
	}{
		{"server", []string{"apply", "--server", primary.addr, "-o", "json", manifests}, primary},
		{"local", []string{"apply", "-o", "json", policies, manifests}, nil},
		{"server+10mutations", []string{"apply", "--server", mutating.addr, "-o", "json", manifests}, mutating},
		{"local+10mutations", []string{"apply", "-o", "json", policies, mutations, manifests}, nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				cmd := exec.Command(binary, c.args...)
				// The reports go to a file, as `arbiter apply -o json > f`
				// (through a pipe, this process's copying would be timed).
				out, err := os.Create(filepath.Join(b.TempDir(), "reports.json"))
				if err != nil {
					b.Fatal(err)
				}
				cmd.Stdout = out
				start := time.Now()
				err = cmd.Run()
				total += time.Since(start)
				// Exit 1: the violating manifests fail Deny policies.
				if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != 1) {
					b.Fatalf("%v: %v", c.args, err)
				}
				size, _ := out.Seek(0, io.SeekEnd)
				out.Close()
				if size < n*1000 {
					b.Fatalf("%d bytes of reports for %d manifests", size, n)
				}
			}
			b.ReportMetric(float64(n*b.N)/total.Seconds(), "manifests/s")
			if c.server != nil {
				// The server's peak resident memory so far: what a stream
				// of 10,000 manifests makes it hold.
				b.ReportMetric(peakRSSMiB(b, c.server.cmd.Process.Pid), "server-peak-MiB")
			}
		})
	}
}

// peakRSSMiB is the peak resident set size of process pid (VmHWM), in MiB.
func peakRSSMiB(b *testing.B, pid int) float64 {
	b.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Skipf("no /proc: %v", err)
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				b.Fatalf("VmHWM: %q", v)
			}
			return float64(kb) / 1024
		}
	}
	b.Fatal("no VmHWM in /proc/PID/status")
	return 0
}
