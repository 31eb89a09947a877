package decisionlog

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func readLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("bad line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func entry(id, kind string, obj map[string]any) *Entry {
	return &Entry{DecisionID: id, Time: time.Unix(0, 0).UTC(), Request: Request{Kind: kind, Operation: "CREATE"}, Allowed: true, Object: obj}
}

func TestMasking(t *testing.T) {
	secret := map[string]any{
		"kind":       "Secret",
		"metadata":   map[string]any{"name": "s", "annotations": map[string]any{"keep": "me"}},
		"data":       map[string]any{"a": "c2VjcmV0", "b": "b3RoZXI="},
		"stringData": map[string]any{"token": "t0k3n"},
	}
	pod := map[string]any{
		"kind": "Pod",
		"spec": map[string]any{"containers": []any{
			map[string]any{"name": "a", "env": []any{map[string]any{"name": "PASSWORD", "value": "hunter2"}}},
			map[string]any{"name": "b", "env": []any{map[string]any{"name": "X", "value": "y"}}},
		}},
	}
	orig := deepCopy(secret)
	origPod := deepCopy(pod)
	path := filepath.Join(t.TempDir(), "log")
	l, err := New(Config{Output: path, IncludeObjects: true,
		Masks: append(append([]string(nil), DefaultMasks...), "Pod:object.spec.containers.*.env.*.value", "*:object.metadata.annotations")})
	if err != nil {
		t.Fatal(err)
	}
	l.Log(entry("1", "Secret", secret))
	l.Log(entry("2", "Pod", pod))
	e := entry("3", "ConfigMap", map[string]any{"data": map[string]any{"k": "v"}})
	l.Log(e)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// The request's objects are not modified.
	if !reflect.DeepEqual(secret, orig) || !reflect.DeepEqual(pod, origPod) {
		t.Fatal("masking modified the request's object")
	}
	lines := readLines(t, path)
	if len(lines) != 3 {
		t.Fatalf("%d lines", len(lines))
	}
	s := lines[0]["object"].(map[string]any)
	if !reflect.DeepEqual(s["data"], map[string]any{"a": Masked, "b": Masked}) || !reflect.DeepEqual(s["stringData"], map[string]any{"token": Masked}) {
		t.Fatalf("secret: %v", s)
	}
	if s["metadata"].(map[string]any)["name"] != "s" {
		t.Fatalf("metadata masked: %v", s["metadata"])
	}
	if !reflect.DeepEqual(s["metadata"].(map[string]any)["annotations"], map[string]any{"keep": Masked}) {
		t.Fatalf("wildcard-kind mask: %v", s["metadata"])
	}
	b, _ := json.Marshal(lines[1]["object"])
	if strings.Contains(string(b), "hunter2") || !strings.Contains(string(b), `"name":"PASSWORD"`) || strings.Contains(string(b), `"value":"y"`) {
		t.Fatalf("pod env masking: %s", b)
	}
	// A ConfigMap's data is not a Secret's: kept.
	if !reflect.DeepEqual(lines[2]["object"], map[string]any{"data": map[string]any{"k": "v"}}) {
		t.Fatalf("configmap: %v", lines[2]["object"])
	}
}

// The default masks hide the credentials and bodies of authorization requests.
func TestMaskingAuthorizationRequests(t *testing.T) {
	envoy := map[string]any{"attributes": map[string]any{"request": map[string]any{"http": map[string]any{
		"path": "/", "body": "secret body", "headers": map[string]any{"authorization": "bearer t0k3n", "cookie": "s=1", "x-id": "7"}}}}}
	httpReq := map[string]any{"attributes": map[string]any{"path": "/", "body": "c2VjcmV0",
		"header": map[string]any{"Authorization": []any{"Basic dXNlcjpwdw=="}, "Accept": []any{"*/*"}}}}
	path := filepath.Join(t.TempDir(), "log")
	l, err := New(Config{Output: path, IncludeObjects: true})
	if err != nil {
		t.Fatal(err)
	}
	l.Log(entry("1", "EnvoyCheckRequest", envoy))
	l.Log(entry("2", "HTTPCheckRequest", httpReq))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	for i, want := range []string{`"authorization":"***"`, `"Authorization":"***"`} {
		b, _ := json.Marshal(lines[i]["object"])
		if !strings.Contains(string(b), want) || strings.Contains(string(b), "t0k3n") || strings.Contains(string(b), "dXNlcjpwdw") ||
			strings.Contains(string(b), "secret body") || strings.Contains(string(b), "c2VjcmV0") {
			t.Errorf("line %d: %s", i+1, b)
		}
		if !strings.Contains(string(b), `"path":"/"`) {
			t.Errorf("line %d: too much masked: %s", i+1, b)
		}
	}
}

func deepCopy(m map[string]any) map[string]any {
	b, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}

func TestObjectsLeftOutByDefault(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	l, err := New(Config{Output: path})
	if err != nil {
		t.Fatal(err)
	}
	l.Log(entry("1", "Secret", map[string]any{"data": map[string]any{"a": "b"}}))
	l.Close()
	if lines := readLines(t, path); lines[0]["object"] != nil {
		t.Fatalf("object logged: %v", lines[0])
	}
}

func TestBadMasksRefused(t *testing.T) {
	for _, m := range []string{"object.data", "Secret:", "Secret:data", "Secret:object..x"} {
		if _, err := New(Config{Output: filepath.Join(t.TempDir(), "l"), Masks: []string{m}}); err == nil {
			t.Errorf("mask %q accepted", m)
		}
	}
	bad := 1.5
	if _, err := New(Config{Output: filepath.Join(t.TempDir(), "l"), SampleAllowed: &bad}); err == nil {
		t.Error("sample rate 1.5 accepted")
	}
}

func TestRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	l, err := New(Config{Output: path, MaxSize: 2000, MaxBackups: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		l.Log(entry(fmt.Sprint(i), "Pod", nil))
		if i%10 == 9 {
			time.Sleep(5 * time.Millisecond) // let the writer flush in several runs
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, p := range []string{path, path + ".1", path + ".2"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if fi.Size() > 2000+300_000 {
			t.Fatalf("%s is %d bytes", p, fi.Size())
		}
		for _, line := range readLines(t, p) {
			ids[line["decisionId"].(string)] = true
		}
	}
	if _, err := os.Stat(path + ".3"); err == nil {
		t.Fatal("more backups than MaxBackups")
	}
	if len(ids) == 0 || len(ids) == 100 {
		t.Fatalf("%d ids kept across the files; want the newest ones, not all", len(ids))
	}
	if !ids["99"] {
		t.Fatal("the newest line is lost")
	}
}

func TestSampling(t *testing.T) {
	half, none := 0.5, 0.0
	l, err := New(Config{Output: filepath.Join(t.TempDir(), "l"), SampleAllowed: &half, SampleDenied: &none})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n := 0
	for i := 0; i < 10000; i++ {
		if l.Sample(true) {
			n++
		}
		if l.Sample(false) {
			t.Fatal("denied sampled at rate 0")
		}
	}
	if n < 4500 || n > 5500 {
		t.Fatalf("%d of 10000 allowed sampled at 0.5", n)
	}
}

// blockingWriter never returns until released: the queue fills and lines
// are dropped, and Log never blocks.
type blockingWriter struct {
	release chan struct{}
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	<-b.release
	return len(p), nil
}

func TestDropsWhenTheWriterFallsBehind(t *testing.T) {
	bw := &blockingWriter{release: make(chan struct{})}
	l := &Logger{cfg: Config{Queue: 10, FlushInterval: time.Hour}, allowed: 1, denied: 1, out: make(chan []byte, 10), done: make(chan struct{}), w: bw}
	go l.run()
	start := time.Now()
	for i := 0; i < 1000; i++ {
		l.Log(entry(fmt.Sprint(i), "Pod", nil))
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Log blocked for %v", d)
	}
	if l.Dropped() == 0 {
		t.Fatal("nothing dropped")
	}
	close(bw.release)
	l.Close()
	if l.Written()+l.Dropped() != 1000 {
		t.Fatalf("written %d + dropped %d != 1000", l.Written(), l.Dropped())
	}
}

func TestConcurrentLogAndClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l")
	l, err := New(Config{Output: path})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				l.Log(entry("x", "Pod", map[string]any{"a": i}))
			}
		}()
	}
	wg.Wait()
	l.Close()
	l.Log(entry("after", "Pod", nil)) // dropped, no panic
	if got := len(readLines(t, path)); uint64(got) != l.Written() || got+int(l.Dropped()) != 4001 {
		t.Fatalf("%d lines, written %d, dropped %d", got, l.Written(), l.Dropped())
	}
}
