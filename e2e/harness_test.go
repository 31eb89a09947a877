// Package e2e runs the arbiter binary as real processes — primaries and
// followers on loopback ports with real bbolt files — and checks what the
// design promises: replicas converge, survive SIGKILL, fall back to
// snapshots, and never decide from an older revision than asked.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/arbiter-pdp/arbiter/client"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "arbiter-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "arbiter")
	build := exec.Command("go", "build", "-o", binary, "../cmd/arbiter")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building arbiter:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running `arbiter serve`.
type proc struct {
	t    testing.TB
	name string
	addr string
	dir  string
	args []string
	cmd  *exec.Cmd
	log  *syncBuffer
	c    *client.Client
	done chan struct{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startPrimary starts a primary in a fresh data directory.
func startPrimary(t testing.TB, extra ...string) *proc {
	return startProc(t, "primary", t.TempDir(), freeAddr(t), extra...)
}

// startFollower starts a follower of p in a fresh data directory.
func startFollower(t testing.TB, name string, p *proc, extra ...string) *proc {
	return startProc(t, name, t.TempDir(), freeAddr(t), append([]string{"--follow", p.addr, "--replica-id", name}, extra...)...)
}

func startProc(t testing.TB, name, dir, addr string, extra ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, addr: addr, dir: dir,
		args: append([]string{"serve", "--listen", addr, "--data", dir, "--log-format", "text", "--log-level", "debug"}, extra...)}
	p.start()
	t.Cleanup(func() { p.stop(syscall.SIGTERM) })
	return p
}

func (p *proc) start() {
	p.t.Helper()
	p.log = &syncBuffer{}
	p.cmd = exec.Command(binary, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func() { p.cmd.Wait(); close(p.done) }()
	c, err := client.Dial(context.Background(), p.addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.c = c
	p.waitListening()
}

func (p *proc) waitListening() {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			p.t.Fatalf("%s exited early:\n%s", p.name, p.log.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := p.c.Status(ctx)
		cancel()
		if err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.t.Fatalf("%s did not start:\n%s", p.name, p.log.String())
}

// stop sends sig and waits for the process to exit.
func (p *proc) stop(sig syscall.Signal) {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.done:
	default:
		p.cmd.Process.Signal(sig)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	}
	if p.c != nil {
		p.c.Close()
		p.c = nil
	}
}

func (p *proc) restart() {
	p.t.Helper()
	p.start()
}

func (p *proc) status() *arbiterv1.StatusResponse {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := p.c.Status(ctx)
	if err != nil {
		p.t.Fatalf("%s status: %v\n%s", p.name, err, p.log.String())
	}
	return st
}

// waitConverged waits until every replica is at the same revision and
// digest as want, and returns it.
func waitConverged(t testing.TB, timeout time.Duration, procs ...*proc) (uint64, string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ref := procs[0].status()
		same := true
		var got []string
		for _, p := range procs {
			st := p.status()
			got = append(got, fmt.Sprintf("%s=%d/%s", p.name, st.GetRevision(), short(st.GetDigest())))
			if st.GetRevision() != ref.GetRevision() || st.GetDigest() != ref.GetDigest() {
				same = false
			}
		}
		if same {
			return ref.GetRevision(), ref.GetDigest()
		}
		if time.Now().After(deadline) {
			for _, p := range procs {
				t.Logf("--- %s log:\n%s", p.name, tail(p.log.String(), 40))
			}
			t.Fatalf("replicas did not converge: %s", strings.Join(got, " "))
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func short(d string) string {
	if len(d) > 16 {
		return d[len(d)-8:]
	}
	return d
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// upsert is a write change of an object.
func upsert(obj map[string]any) *arbiterv1.Change {
	b, _ := json.Marshal(obj)
	return &arbiterv1.Change{Op: arbiterv1.ChangeOp_CHANGE_OP_UPSERT, ObjectJson: b}
}

func del(group, kind, ns, name string) *arbiterv1.Change {
	return &arbiterv1.Change{Op: arbiterv1.ChangeOp_CHANGE_OP_DELETE, Key: &arbiterv1.ObjectKey{Group: group, Kind: kind, Namespace: ns, Name: name}}
}

func write(t testing.TB, p *proc, changes ...*arbiterv1.Change) *arbiterv1.WriteAck {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := p.c.Write(ctx, &arbiterv1.WriteBatch{Changes: changes})
	if err != nil {
		t.Fatalf("write to %s: %v", p.name, err)
	}
	return ack
}

// policy is a ValidatingPolicy denying pods whose name starts with prefix.
func policy(name, prefix string) map[string]any {
	return map[string]any{
		"apiVersion": "policies.kyverno.io/v1",
		"kind":       "ValidatingPolicy",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"validationActions": []any{"Deny"},
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE", "UPDATE"}, "resources": []any{"pods"},
			}}},
			"validations": []any{map[string]any{
				"expression": fmt.Sprintf("!object.metadata.name.startsWith('%s')", prefix),
				"message":    fmt.Sprintf("%s pods are not allowed", prefix),
			}},
		},
	}
}

// exception exempts the pod named podName from policyName.
func exception(name, policyName, podName string) map[string]any {
	return map[string]any{
		"apiVersion": "policies.kyverno.io/v1",
		"kind":       "PolicyException",
		"metadata":   map[string]any{"name": name, "namespace": "exceptions"},
		"spec": map[string]any{
			"policyRefs":      []any{map[string]any{"name": policyName, "kind": "ValidatingPolicy"}},
			"matchConditions": []any{map[string]any{"name": "pod", "expression": fmt.Sprintf("object.metadata.name == '%s'", podName)}},
		},
	}
}

func namespace(name string, labels map[string]any) map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name, "labels": labels}}
}

func podJSON(name string) []byte {
	b, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": "default"},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "c", "image": "nginx"}}},
	})
	return b
}
