// Package decisionlog writes one JSON line per decision: its id, time,
// revision and digest, the caller's identity, a summary of the request, the
// verdict, every policy result and the exceptions granted or refused; with
// dry-run requests marked. Lines can be sampled (separately for allowed and
// denied decisions), go to stdout or to a file rotated by size, and, when
// request objects are included, have fields masked by configuration (by
// default the data and stringData of Secrets).
//
// Encoding happens in the deciding goroutine; one writer goroutine writes
// the lines through a buffer. When the writer falls behind by more than
// Config.Queue lines, lines are dropped and counted (Dropped), so a slow
// disk never slows decisions down.
package decisionlog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults.
const (
	DefaultMaxSize    = 100 << 20
	DefaultMaxBackups = 5
	DefaultQueue      = 16384
)

// DefaultMasks mask the contents of Secrets, and the credentials and
// bodies of authorization requests (the kinds the server logs Envoy and
// HTTP CheckRequests under): their Authorization, Cookie and
// Proxy-Authorization headers, as Envoy (lower case) and Go's net/http
// (canonical case) name them.
var DefaultMasks = []string{
	"Secret:object.data", "Secret:object.stringData",
	"Secret:oldObject.data", "Secret:oldObject.stringData",
	"EnvoyCheckRequest:object.attributes.request.http.headers.authorization",
	"EnvoyCheckRequest:object.attributes.request.http.headers.cookie",
	"EnvoyCheckRequest:object.attributes.request.http.headers.proxy-authorization",
	"EnvoyCheckRequest:object.attributes.request.http.body",
	"EnvoyCheckRequest:object.attributes.request.http.rawBody",
	"HTTPCheckRequest:object.attributes.header.Authorization",
	"HTTPCheckRequest:object.attributes.header.Cookie",
	"HTTPCheckRequest:object.attributes.header.Proxy-Authorization",
	"HTTPCheckRequest:object.attributes.body",
}

// Config configures a Logger.
type Config struct {
	// Output is "-" or "stdout" for standard output, "stderr", or a file
	// path (created, appended to, rotated by size).
	Output string
	// MaxSize is the size in bytes at which the file is rotated (default
	// DefaultMaxSize; negative: never).
	MaxSize int64
	// MaxBackups is how many rotated files (FILE.1 ... FILE.N) are kept
	// (default DefaultMaxBackups).
	MaxBackups int
	// SampleAllowed and SampleDenied are the fractions of allowed and of
	// denied decisions logged, in [0, 1] (nil: 1).
	SampleAllowed, SampleDenied *float64
	// IncludeObjects adds the request's object and oldObject to each line
	// (after masking).
	IncludeObjects bool
	// Masks are the fields replaced by "***" in logged objects, each
	// "KIND:PATH" (KIND "*" for every kind; PATH a dot-separated path from
	// the line's object or oldObject, "*" matching every key or element).
	// A masked map keeps its keys. nil: DefaultMasks; empty: none.
	Masks []string
	// Queue is how many encoded lines may wait for the writer (default
	// DefaultQueue).
	Queue int
	// FlushInterval bounds how long a line stays buffered (default 1s).
	FlushInterval time.Duration
}

// Logger writes decision lines.
type Logger struct {
	cfg     Config
	masks   []mask
	allowed float64
	denied  float64

	out     chan []byte
	done    chan struct{}
	closeMu sync.RWMutex
	closed  bool
	w       io.Writer
	rot     *rotator
	written atomic.Uint64
	dropped atomic.Uint64
	errs    atomic.Uint64
	lastErr atomic.Pointer[string]
}

// New opens the output and starts the writer.
func New(cfg Config) (*Logger, error) {
	if cfg.Output == "" {
		return nil, errors.New("decision log: no output (a file path, or - for stdout)")
	}
	if cfg.MaxSize == 0 {
		cfg.MaxSize = DefaultMaxSize
	}
	if cfg.MaxBackups == 0 {
		cfg.MaxBackups = DefaultMaxBackups
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = time.Second
	}
	if cfg.Masks == nil {
		cfg.Masks = DefaultMasks
	}
	l := &Logger{cfg: cfg, allowed: 1, denied: 1, out: make(chan []byte, cfg.Queue), done: make(chan struct{})}
	for _, p := range []struct {
		v   *float64
		dst *float64
		n   string
	}{{cfg.SampleAllowed, &l.allowed, "allowed"}, {cfg.SampleDenied, &l.denied, "denied"}} {
		if p.v == nil {
			continue
		}
		if *p.v < 0 || *p.v > 1 {
			return nil, fmt.Errorf("decision log: sample rate of %s decisions %v is not in [0, 1]", p.n, *p.v)
		}
		*p.dst = *p.v
	}
	for _, m := range cfg.Masks {
		pm, err := parseMask(m)
		if err != nil {
			return nil, err
		}
		l.masks = append(l.masks, pm)
	}
	switch cfg.Output {
	case "-", "stdout":
		l.w = os.Stdout
	case "stderr":
		l.w = os.Stderr
	default:
		r, err := openRotator(cfg.Output, cfg.MaxSize, cfg.MaxBackups)
		if err != nil {
			return nil, err
		}
		l.rot, l.w = r, r
	}
	go l.run()
	return l, nil
}

// Sample says whether a decision with this verdict is to be logged.
func (l *Logger) Sample(allowed bool) bool {
	p := l.allowed
	if !allowed {
		p = l.denied
	}
	return p >= 1 || p > 0 && rand.Float64() < p
}

// IncludeObjects says whether lines carry the request's objects.
func (l *Logger) IncludeObjects() bool { return l.cfg.IncludeObjects }

// Log masks, encodes and queues e. It never blocks on the output.
func (l *Logger) Log(e *Entry) {
	if l.cfg.IncludeObjects && len(l.masks) > 0 {
		kind := e.Request.Kind
		e.Object = l.mask(kind, "object", e.Object)
		e.OldObject = l.mask(kind, "oldObject", e.OldObject)
	}
	if !l.cfg.IncludeObjects {
		e.Object, e.OldObject = nil, nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		l.noteErr(err)
		return
	}
	b = append(b, '\n')
	l.closeMu.RLock()
	defer l.closeMu.RUnlock()
	if l.closed {
		l.dropped.Add(1)
		return
	}
	select {
	case l.out <- b:
	default:
		l.dropped.Add(1)
	}
}

// Written, Dropped and Errors count lines written, dropped because the
// queue was full, and failed writes.
func (l *Logger) Written() uint64 { return l.written.Load() }
func (l *Logger) Dropped() uint64 { return l.dropped.Load() }
func (l *Logger) Errors() uint64  { return l.errs.Load() }

// LastError returns the last write error ("" when none).
func (l *Logger) LastError() string {
	if p := l.lastErr.Load(); p != nil {
		return *p
	}
	return ""
}

func (l *Logger) noteErr(err error) {
	l.errs.Add(1)
	s := err.Error()
	l.lastErr.Store(&s)
}

// Close writes what is queued and closes the output.
func (l *Logger) Close() error {
	l.closeMu.Lock()
	if l.closed {
		l.closeMu.Unlock()
		<-l.done
		return nil
	}
	l.closed = true
	close(l.out)
	l.closeMu.Unlock()
	<-l.done
	if l.rot != nil {
		return l.rot.Close()
	}
	return nil
}

func (l *Logger) run() {
	defer close(l.done)
	// buf holds whole lines only, so a rotation never splits one.
	const bufSize = 256 << 10
	buf := make([]byte, 0, bufSize)
	t := time.NewTicker(l.cfg.FlushInterval)
	defer t.Stop()
	flush := func() {
		if len(buf) == 0 {
			return
		}
		if _, err := l.w.Write(buf); err != nil {
			l.noteErr(err)
		}
		buf = buf[:0]
	}
	for {
		select {
		case b, ok := <-l.out:
			if !ok {
				flush()
				return
			}
			if len(buf)+len(b) > bufSize {
				flush()
			}
			buf = append(buf, b...)
			l.written.Add(1)
			if len(l.out) == 0 {
				// Idle: nothing else to batch with.
				flush()
			}
		case <-t.C:
			flush()
		}
	}
}

// rotator is a file rotated by size: FILE → FILE.1 → ... → FILE.N.
type rotator struct {
	path    string
	maxSize int64
	backups int
	f       *os.File
	size    int64
}

func openRotator(path string, maxSize int64, backups int) (*rotator, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("decision log: %w", err)
	}
	r := &rotator{path: path, maxSize: maxSize, backups: backups}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *rotator) open() error {
	f, err := os.OpenFile(r.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("decision log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("decision log: %w", errors.Join(err, f.Close()))
	}
	r.f, r.size = f, fi.Size()
	return nil
}

// Write writes p, rotating first when p would take the file over maxSize.
// The writer hands it whole lines (or runs of whole lines).
func (r *rotator) Write(p []byte) (int, error) {
	if r.maxSize > 0 && r.size > 0 && r.size+int64(len(p)) > r.maxSize {
		if err := r.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := r.f.Write(p)
	r.size += int64(n)
	return n, err
}

func (r *rotator) rotate() error {
	if err := r.f.Close(); err != nil {
		return err
	}
	if r.backups > 0 {
		_ = os.Remove(r.path + "." + strconv.Itoa(r.backups))
		for i := r.backups - 1; i >= 1; i-- {
			_ = os.Rename(r.path+"."+strconv.Itoa(i), r.path+"."+strconv.Itoa(i+1))
		}
		if err := os.Rename(r.path, r.path+".1"); err != nil {
			return err
		}
	} else if err := os.Truncate(r.path, 0); err != nil {
		return err
	}
	return r.open()
}

func (r *rotator) Close() error { return r.f.Close() }

// mask is one parsed mask: a kind ("" for every kind) and a path.
type mask struct {
	kind string
	root string // "object" or "oldObject"
	path []string
}

func parseMask(s string) (mask, error) {
	kind, path, ok := strings.Cut(s, ":")
	if !ok || kind == "" || path == "" {
		return mask{}, fmt.Errorf("decision log mask %q: want KIND:PATH (e.g. Secret:object.data, *:object.spec.env)", s)
	}
	if kind == "*" {
		kind = ""
	}
	parts := strings.Split(path, ".")
	if parts[0] != "object" && parts[0] != "oldObject" {
		return mask{}, fmt.Errorf("decision log mask %q: the path starts at object or oldObject", s)
	}
	for _, p := range parts {
		if p == "" {
			return mask{}, fmt.Errorf("decision log mask %q: empty path segment", s)
		}
	}
	return mask{kind: kind, root: parts[0], path: parts[1:]}, nil
}

// Masked is what a masked value is replaced with.
const Masked = "***"

// mask returns v (the request's object or oldObject) with the masks of
// kind applied. v is not modified: maps and lists on a masked path are
// copied.
func (l *Logger) mask(kind, root string, v map[string]any) map[string]any {
	if v == nil {
		return nil
	}
	var out any = v
	for _, m := range l.masks {
		if m.root != root || m.kind != "" && m.kind != kind {
			continue
		}
		out = maskPath(out, m.path)
	}
	mv, _ := out.(map[string]any)
	return mv
}

func maskPath(v any, path []string) any {
	if len(path) == 0 {
		switch t := v.(type) {
		case map[string]any:
			c := make(map[string]any, len(t))
			for k := range t {
				c[k] = Masked
			}
			return c
		case nil:
			return nil
		}
		return Masked
	}
	seg, rest := path[0], path[1:]
	switch t := v.(type) {
	case map[string]any:
		if seg == "*" {
			c := make(map[string]any, len(t))
			for k, e := range t {
				c[k] = maskPath(e, rest)
			}
			return c
		}
		e, ok := t[seg]
		if !ok {
			return v
		}
		c := make(map[string]any, len(t))
		for k, x := range t {
			c[k] = x
		}
		c[seg] = maskPath(e, rest)
		return c
	case []any:
		if seg == "*" {
			c := make([]any, len(t))
			for i, e := range t {
				c[i] = maskPath(e, rest)
			}
			return c
		}
		if i, err := strconv.Atoi(seg); err == nil && i >= 0 && i < len(t) {
			c := append([]any(nil), t...)
			c[i] = maskPath(t[i], rest)
			return c
		}
	}
	return v
}
