package patch

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strconv"
	"strings"
	"unsafe"
)

// Op is one RFC 6902 operation. Value is JSON-shaped data, and nil is JSON
// null: an Op without a "value" member must say so with NoValue{} (a test
// with no value passes on a missing or null target, a test of null fails
// there). An empty From is an operation without a "from" member.
type Op struct {
	Op, Path, From string
	Value          any
}

// NoValue as an Op's Value is the absence of the "value" member (a CEL
// JSONPatch whose value is unset), as opposed to nil, a JSON null.
type NoValue struct{}

// ErrPanic is wrapped by the errors of patches on which
// gopkg.in/evanphx/json-patch.v4 panics (and kube-apiserver fails the request
// with an internal error).
var ErrPanic = errors.New("kube-apiserver's JSON Patch implementation fails on this patch")

// ErrNotObject is wrapped by the error of a patch whose result is not an
// object (a replace of the whole document by an array or null).
var ErrNotObject = errors.New("the patched document is not an object")

// KubeAPIServerMaxCopyBytes is the limit kube-apiserver sets on the bytes a
// patch's copy operations may add (its JSONPatchMaxCopyBytes default).
const KubeAPIServerMaxCopyBytes = 3 * 1024 * 1024

// Options are evanphx's package-level options that differ between the
// reference implementations.
type Options struct {
	// MaxCopyBytes bounds the JSON size of the values a patch's copy
	// operations add, summed (evanphx's AccumulatedCopySizeLimit); 0 is no
	// limit, evanphx's default and Kyverno's.
	MaxCopyBytes int64
}

// ApplyJSONPatch applies ops to obj with no copy limit (evanphx's defaults,
// Kyverno's MutatingPolicy). See the package documentation for the
// semantics. obj and the operations' values are never modified; the result
// may share their subtrees.
func ApplyJSONPatch(obj map[string]any, ops []Op) (map[string]any, error) {
	return Options{}.ApplyJSONPatch(obj, ops)
}

// ApplyJSONPatch applies ops to obj with the options o.
func (o Options) ApplyJSONPatch(obj map[string]any, ops []Op) (map[string]any, error) {
	if len(ops) == 0 {
		return obj, nil
	}
	a := applier{limit: o.MaxCopyBytes}
	if obj == nil {
		a.root = rawNull{}
	} else {
		a.root = obj
	}
	switch err := a.run(ops); err {
	case nil:
		return a.root.(map[string]any), nil
	case errTestFailed:
		return obj, nil
	default:
		return nil, err
	}
}

// A Patcher applies JSON Patches in turn to one object, as the mutating
// policies of one admission request do, each patch with ApplyJSONPatch's
// semantics on the object the patches before it left. Unlike a chain of
// ApplyJSONPatch calls, it copies a container of the object once for all
// the patches, not once per patch, and changes it in place afterwards. A
// patch whose test fails, or that fails, leaves the object as it was (its
// changes are undone); a Savepoint marks the object to roll back to, or to
// compare with, across several patches.
//
// The object it starts from and the operations' values are never modified
// (the values are read as they are when Apply starts). The object Object
// returns is the Patcher's own: it changes with the next Apply. A Patcher is
// not safe for concurrent use.
type Patcher struct {
	a applier
	// held says a Savepoint is held: the journal is kept across patches.
	held bool
}

// NewPatcher returns a Patcher starting from obj.
func NewPatcher(obj map[string]any, o Options) *Patcher {
	p := &Patcher{}
	p.Reset(obj, o)
	return p
}

// Reset makes p a Patcher starting from obj, as NewPatcher does, reusing
// its memory.
func (p *Patcher) Reset(obj map[string]any, o Options) {
	p.a.limit = o.MaxCopyBytes
	p.a.count = true
	p.SetObject(obj)
}

// Object returns the object as the patches applied so far left it.
func (p *Patcher) Object() map[string]any {
	m, _ := p.a.root.(map[string]any)
	return m
}

// SetObject makes obj the object the next patches apply to (the result of
// a mutation made otherwise, say). obj is never modified; the Patcher owns
// none of its containers. Savepoints taken before are no longer valid.
func (p *Patcher) SetObject(obj map[string]any) {
	p.a.owned.reset()
	p.a.gen = 0
	p.a.journal = p.a.journal[:0]
	p.held = false
	if obj == nil {
		p.a.root = rawNull{}
	} else {
		p.a.root = obj
	}
}

// Owns says whether c is a map or slice of the object that the Patcher
// made, which later patches change in place; the object's other containers
// never change.
func (p *Patcher) Owns(c any) bool {
	return p.a.owned.has(identity(c))
}

// Apply applies one patch. It reports whether the patch changed the object:
// false with a nil error when a test operation failed (the patch is a no-op,
// as kube-apiserver and Kyverno treat it); false with the error when the
// patch fails, the object then being as before.
func (p *Patcher) Apply(ops []Op) (bool, error) {
	if len(ops) == 0 {
		return true, nil
	}
	a := &p.a
	a.gen++
	if !p.held {
		a.journal = a.journal[:0]
	}
	start, changes, destructive := len(a.journal), a.changes, a.destructive
	if a.owned.n > 0 {
		// The values are read as they are now: one that holds a container
		// of the object is copied before the patch changes it in place.
		ops = a.detachValues(ops)
	}
	root := a.root
	err := a.run(ops)
	if err == nil {
		return true, nil
	}
	a.undo(start)
	a.root = root
	a.changes, a.destructive = changes, destructive
	if err == errTestFailed {
		return false, nil
	}
	return false, err
}

// detachValues returns ops, or a copy of them whose values hold none of
// the containers the Patcher made.
func (a *applier) detachValues(ops []Op) []Op {
	var out []Op
	for i := range ops {
		if d, changed := a.detached(ops[i].Value); changed {
			if out == nil {
				out = append([]Op(nil), ops...)
			}
			out[i].Value = d
		}
	}
	if out == nil {
		return ops
	}
	return out
}

// undo undoes the changes journaled from start on, last first.
func (a *applier) undo(start int) {
	for i := len(a.journal) - 1; i >= start; i-- {
		u := &a.journal[i]
		switch {
		case u.m != nil && u.existed:
			u.m[u.k] = u.old
		case u.m != nil:
			delete(u.m, u.k)
		default:
			u.s[u.i] = u.old
		}
	}
	clear(a.journal[start:])
	a.journal = a.journal[:start]
}

// A Savepoint is the object of a Patcher at one time, to roll back to or
// compare with while it is held (until Release).
type Savepoint struct {
	root                 any
	journal              int
	gen                  uint32
	changes, destructive int
}

// Savepoint returns the object as it is now, and holds it: the Patcher
// keeps what it needs to roll back to it until Release.
func (p *Patcher) Savepoint() Savepoint {
	p.held = true
	return Savepoint{root: p.a.root, journal: len(p.a.journal), gen: p.a.gen, changes: p.a.changes, destructive: p.a.destructive}
}

// Rollback undoes the patches applied since sp: the object is as it was
// then (its containers hold what they held then).
func (p *Patcher) Rollback(sp Savepoint) {
	p.a.undo(sp.journal)
	p.a.root = sp.root
	p.a.changes, p.a.destructive = sp.changes, sp.destructive
}

// Touched says whether a patch changed the object since sp (perhaps back
// to what it was: see Changed); when not, Rollback to sp has nothing to do.
func (p *Patcher) Touched(sp Savepoint) bool {
	return len(p.a.journal) > sp.journal || !sameNode(sp.root, p.a.root)
}

// Release lets go of the Savepoints held: none may be used afterwards.
func (p *Patcher) Release() {
	clear(p.a.journal)
	p.a.journal = p.a.journal[:0]
	p.held = false
}

// Changed says whether the object differs from what it was at sp, as Equal
// compares them.
func (p *Patcher) Changed(sp Savepoint) bool {
	a := &p.a
	switch n := a.changes - sp.changes; {
	case n == 0:
		// Every write since put a value equal to the one it replaced.
		return false
	case n == 1 || a.destructive == sp.destructive:
		// One write changed the object (and no other changed it back), or
		// the changes only added: keys where there were none, elements.
		return true
	}
	return !a.eqBefore(sp.gen, a.journal[sp.journal:], sp.root, a.root)
}

// sameNode says whether a and b are the same container.
func sameNode(a, b any) bool {
	ia, ib := identity(a), identity(b)
	return ia != nil && ia == ib
}

// eqBefore compares b as it was at the savepoint of generation gen, the
// changes since being journaled in j, with x as it is now. The containers
// that existed then, that the Patcher had made and that a patch touched
// since (changed, or a container in them) may have changed in place: their
// entries then are the first journaled for them, or their entries now;
// every other container is as it was.
func (a *applier) eqBefore(gen uint32, j []undo, b, x any) bool {
	if o, ok := a.owned.info(identity(b)); !ok || o.gen > gen || o.touched <= gen {
		// b has not changed since (nor any container in it).
		return Equal(b, x)
	}
	switch bt := b.(type) {
	case map[string]any:
		xt, ok := x.(map[string]any)
		if !ok || xt == nil {
			return false
		}
		n := 0
		for k, v := range bt {
			if u := firstKey(j, bt, k); u != nil {
				if !u.existed {
					continue
				}
				v = u.old
			}
			n++
			xv, ok := xt[k]
			if !ok || !a.eqBefore(gen, j, v, xv) {
				return false
			}
		}
		for i := range j {
			u := &j[i]
			if u.m == nil || !sameMap(u.m, bt) || !u.existed {
				continue
			}
			if _, now := bt[u.k]; now || firstKey(j, bt, u.k) != u {
				continue
			}
			// Removed since.
			n++
			xv, ok := xt[u.k]
			if !ok || !a.eqBefore(gen, j, u.old, xv) {
				return false
			}
		}
		return n == len(xt)
	case []any:
		xt, ok := x.([]any)
		if !ok || xt == nil || len(xt) != len(bt) {
			return false
		}
		for i, v := range bt {
			if u := firstIndex(j, bt, i); u != nil {
				v = u.old
			}
			if !a.eqBefore(gen, j, v, xt[i]) {
				return false
			}
		}
		return true
	}
	return Equal(b, x)
}

// firstKey returns the first change of m's key k journaled in j, or nil.
func firstKey(j []undo, m map[string]any, k string) *undo {
	for i := range j {
		if u := &j[i]; u.m != nil && u.k == k && sameMap(u.m, m) {
			return u
		}
	}
	return nil
}

// firstIndex returns the first change of s's element i journaled in j, or
// nil.
func firstIndex(j []undo, s []any, i int) *undo {
	for n := range j {
		if u := &j[n]; u.m == nil && u.i == i && identity(u.s) == identity(s) {
			return u
		}
	}
	return nil
}

// run applies ops to a.root: nil with the patched object at a.root, or
// errTestFailed, or the patch's error.
func (a *applier) run(ops []Op) error {
	a.nulls = false
	a.copied = 0
	for i := range ops {
		if err := a.apply(&ops[i]); err != nil {
			return err
		}
	}
	switch r := a.root.(type) {
	case map[string]any:
		if r == nil {
			break
		}
		if a.nulls {
			a.clean(r)
		}
		return nil
	case []any:
		if r != nil {
			return fmt.Errorf("JSON Patch: %w (it is an array)", ErrNotObject)
		}
	}
	return fmt.Errorf("JSON Patch: %w (it is null)", ErrNotObject)
}

// errTestFailed stands for evanphx's errors wrapping ErrTestFailed: the
// patch is a no-op.
var errTestFailed = errors.New("test failed")

// rawNull is a JSON null set by an operation, which evanphx holds as a
// "null" literal: a path through it finds an empty object that cannot be
// written to (a nil map), and test compares it as {} (or [] against an
// array). The nulls of the object itself (and those nested in a value)
// are nil: no container at all. rawNull only ever appears in containers the
// applier owns, and the result holds nil in its place.
type rawNull struct{}

type kind uint8

const (
	kNull    kind = iota // nil, or a nil map or slice (JSON null)
	kRawNull             // rawNull
	kMap
	kArray
	kScalar
)

func kindOf(v any) kind {
	switch t := v.(type) {
	case nil:
		return kNull
	case map[string]any:
		if t == nil {
			return kNull
		}
		return kMap
	case []any:
		if t == nil {
			return kNull
		}
		return kArray
	case rawNull:
		return kRawNull
	}
	return kScalar
}

// applier applies patches. The document is root; the maps and slices in
// owned were made by the applier, so it may change them in place; every
// other container (obj's, the values') is copied first. A container owned
// since an earlier patch (of a Patcher) is journaled before it changes, so
// that the patch can be undone.
type applier struct {
	root    any // map[string]any, []any or rawNull
	owned   ownedSet
	gen     uint32 // the patch being applied
	journal []undo
	nulls   bool // a rawNull was stored by this patch
	// changes counts the writes that changed a value, of the patches
	// applied (but not undone); destructive those that were not additions
	// (a key added where there was none, an element inserted).
	changes, destructive int
	count                bool // count the changes (a Patcher's)
	limit                int64
	copied               int64
	buf                  []byte
}

// undo restores a map's key (or deletes it) or a slice's element.
type undo struct {
	m       map[string]any
	s       []any
	k       string
	i       int
	old     any
	existed bool
}

// ownedSet holds the identities of the containers the applier made, with
// the patch that made each and the last that changed it or a container in
// it: a few inline, the rest in a map.
type ownedSet struct {
	n     int
	small [16]ownedEntry
	big   map[unsafe.Pointer]ownedInfo
}

type ownedEntry struct {
	p unsafe.Pointer
	ownedInfo
}

type ownedInfo struct {
	gen, touched uint32
}

func identity(v any) unsafe.Pointer {
	switch t := v.(type) {
	case map[string]any:
		return reflect.ValueOf(t).UnsafePointer()
	case []any:
		if cap(t) == 0 {
			return nil // never owned: nothing to change in place
		}
		return unsafe.Pointer(unsafe.SliceData(t))
	}
	return nil
}

// info returns what is known of the container p, if the applier made it.
func (s *ownedSet) info(p unsafe.Pointer) (ownedInfo, bool) {
	if p == nil {
		return ownedInfo{}, false
	}
	for i := range s.small[:s.n] {
		if s.small[i].p == p {
			return s.small[i].ownedInfo, true
		}
	}
	o, ok := s.big[p]
	return o, ok
}

// gen returns the patch that made the container p, if the applier made it.
func (s *ownedSet) gen(p unsafe.Pointer) (uint32, bool) {
	o, ok := s.info(p)
	return o.gen, ok
}

// touch records that the patch gen changes the container p or one in it,
// if the applier made p; it reports whether it did.
func (s *ownedSet) touch(p unsafe.Pointer, gen uint32) bool {
	if p == nil {
		return false
	}
	for i := range s.small[:s.n] {
		if s.small[i].p == p {
			s.small[i].touched = gen
			return true
		}
	}
	o, ok := s.big[p]
	if ok && o.touched != gen {
		o.touched = gen
		s.big[p] = o
	}
	return ok
}

func (s *ownedSet) reset() {
	clear(s.small[:s.n])
	s.n = 0
	s.big = nil
}

func (s *ownedSet) has(p unsafe.Pointer) bool {
	_, ok := s.gen(p)
	return ok
}

func (s *ownedSet) add(p unsafe.Pointer, gen uint32) {
	if p == nil {
		return
	}
	o := ownedInfo{gen: gen, touched: gen}
	if s.n < len(s.small) {
		s.small[s.n] = ownedEntry{p, o}
		s.n++
		return
	}
	if s.big == nil {
		s.big = make(map[unsafe.Pointer]ownedInfo)
	}
	s.big[p] = o
}

// made registers a container the applier just made.
func (a *applier) made(c any) {
	a.owned.add(identity(c), a.gen)
}

// old reports whether an owned container was made by an earlier patch, and
// so must be journaled before it changes.
func (a *applier) old(c any) bool {
	if a.gen == 0 {
		return false
	}
	g, _ := a.owned.gen(identity(c))
	return g < a.gen
}

// put sets m[k] = v in an owned map, counting the change.
func (a *applier) put(m map[string]any, k string, v any) {
	if !a.count {
		a.setKey(m, k, v)
		return
	}
	old, existed := m[k]
	a.setKey(m, k, v)
	if !existed {
		a.changes++ // an addition
	} else {
		a.replaced(old, v)
	}
}

// replaced counts the change of a value from old to v, if it is one.
func (a *applier) replaced(old, v any) {
	if a.count && !Equal(old, v) {
		a.changes++
		a.destructive++
	}
}

// setKey sets m[k] = v in an owned map.
func (a *applier) setKey(m map[string]any, k string, v any) {
	if a.old(m) {
		old, existed := m[k]
		a.journal = append(a.journal, undo{m: m, k: k, old: old, existed: existed})
	}
	m[k] = v
}

// delKey deletes m[k] from an owned map.
func (a *applier) delKey(m map[string]any, k string) {
	if a.old(m) {
		old, existed := m[k]
		a.journal = append(a.journal, undo{m: m, k: k, old: old, existed: existed})
	}
	delete(m, k)
}

// setIndex sets s[i] = v in an owned slice.
func (a *applier) setIndex(s []any, i int, v any) {
	if a.old(s) {
		a.journal = append(a.journal, undo{s: s, i: i, old: s[i]})
	}
	s[i] = v
}

// slot is where a container is held: the root, a key of an owned map or an
// index of an owned array.
type slot struct {
	m map[string]any
	s []any
	k string
	i int
}

func (a *applier) store(sl slot, v any) {
	switch {
	case sl.m != nil:
		a.setKey(sl.m, sl.k, v)
	case sl.s != nil:
		a.setIndex(sl.s, sl.i, v)
	default:
		a.root = v
	}
}

// own returns the container c held at sl, copied into sl first when the
// applier does not own it, to be changed (itself or a container in it).
func (a *applier) own(c any, sl slot) any {
	switch t := c.(type) {
	case map[string]any:
		if a.owned.touch(identity(t), a.gen) {
			return t
		}
		m := maps.Clone(t)
		a.made(m)
		a.store(sl, m)
		return m
	case []any:
		if a.owned.touch(identity(t), a.gen) {
			return t
		}
		s := make([]any, len(t))
		copy(s, t)
		a.made(s)
		a.store(sl, s)
		return s
	}
	return c
}

// value is the node an operation's value becomes in the document: a null is
// a rawNull, a missing value a nil.
func (a *applier) value(op *Op) any {
	switch kindOf(op.Value) {
	case kNull:
		a.nulls = true
		return rawNull{}
	case kScalar:
		if _, ok := op.Value.(NoValue); ok {
			return nil
		}
	}
	return op.Value
}

// detached returns v, or a copy of v where it reaches a container made by
// a Patcher (reporting whether it copied): a value computed from the
// Patcher's object may hold its containers, which must not be reachable
// twice. The containers of the document that the applier did not make
// never hold one it made, as values are detached.
func (a *applier) detached(v any) (any, bool) {
	switch t := v.(type) {
	case map[string]any:
		var m map[string]any
		if a.owned.has(identity(t)) {
			m = maps.Clone(t)
		}
		for k, e := range t {
			if d, changed := a.detached(e); changed {
				if m == nil {
					m = maps.Clone(t)
				}
				m[k] = d
			}
		}
		if m == nil {
			return v, false
		}
		a.made(m)
		return m, true
	case []any:
		var s []any
		if a.owned.has(identity(t)) {
			s = append([]any(nil), t...)
		}
		for i, e := range t {
			if d, changed := a.detached(e); changed {
				if s == nil {
					s = append([]any(nil), t...)
				}
				s[i] = d
			}
		}
		if s == nil {
			return v, false
		}
		a.made(s)
		return s, true
	}
	return v, false
}

// path is a JSON Pointer as evanphx's findObject splits it.
type path struct {
	rest string // the tokens after the first "/", "/"-separated
	ok   bool   // the pointer has a "/"
}

func parsePath(p string) path {
	i := strings.IndexByte(p, '/')
	if i < 0 {
		return path{}
	}
	return path{rest: p[i+1:], ok: true}
}

// next splits off the next token; last reports whether it was the last.
func (p *path) next() (tok string, last bool) {
	if i := strings.IndexByte(p.rest, '/'); i >= 0 {
		tok, p.rest = p.rest[:i], p.rest[i+1:]
		return tok, false
	}
	tok, p.rest = p.rest, ""
	return tok, true
}

// unescape decodes a token as evanphx's decodePatchKey (strings.Replacer
// with "~1"→"/", "~0"→"~", leftmost first).
func unescape(tok string) string {
	i := strings.IndexByte(tok, '~')
	if i < 0 {
		return tok
	}
	var b strings.Builder
	b.Grow(len(tok))
	b.WriteString(tok[:i])
	for ; i < len(tok); i++ {
		c := tok[i]
		if c == '~' && i+1 < len(tok) {
			switch tok[i+1] {
			case '1':
				b.WriteByte('/')
				i++
				continue
			case '0':
				b.WriteByte('~')
				i++
				continue
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

// index parses an array index as evanphx's partialArray.get: the index
// adjusted for a negative one, or its error.
func index(key string, n int) (int, error) {
	idx, err := strconv.Atoi(key)
	if err != nil {
		return 0, err
	}
	if idx < 0 {
		if idx < -n {
			return 0, invalidIndex(idx)
		}
		idx += n
	}
	if idx >= n {
		return 0, invalidIndex(idx)
	}
	return idx, nil
}

func invalidIndex(idx int) error {
	return fmt.Errorf("Unable to access invalid index: %d: invalid index referenced", idx) //nolint:staticcheck // ST1005: evanphx/json-patch's message, word for word
}

// get is evanphx's container get: a map's (or a rawNull's) missing key is a
// nil.
func get(c any, key string) (any, error) {
	switch t := c.(type) {
	case map[string]any:
		return t[key], nil
	case []any:
		i, err := index(key, len(t))
		if err != nil {
			return nil, err
		}
		return t[i], nil
	}
	return nil, nil // rawNull
}

// child steps into the container a token names, as findObject does for
// every token but the last: nothing when the value is missing, null or a
// scalar.
func child(c any, tok string) (v any, sl slot, ok bool) {
	key := unescape(tok)
	switch t := c.(type) {
	case map[string]any:
		v = t[key]
		sl = slot{m: t, k: key}
	case []any:
		i, err := index(key, len(t))
		if err != nil {
			return nil, slot{}, false
		}
		v = t[i]
		sl = slot{s: t, i: i}
	default:
		return nil, slot{}, false // rawNull: an empty object
	}
	switch kindOf(v) {
	case kMap, kArray, kRawNull:
		return v, sl, true
	}
	return nil, slot{}, false
}

// find returns the container that holds the last token of p, and that token
// unescaped, without changing anything.
func (a *applier) find(p string) (c any, key string, ok bool) {
	pp := parsePath(p)
	if !pp.ok {
		return nil, "", false
	}
	c = a.root
	for {
		tok, last := pp.next()
		if last {
			return c, unescape(tok), true
		}
		if c, _, ok = child(c, tok); !ok {
			return nil, "", false
		}
	}
}

// findMut is find for a change: the containers on the way are owned (copied
// when they were not); the last one is returned with its slot, not yet owned.
func (a *applier) findMut(p string) (c any, sl slot, key string, ok bool) {
	pp := parsePath(p)
	if !pp.ok {
		return nil, slot{}, "", false
	}
	c = a.root
	for {
		tok, last := pp.next()
		if last {
			return c, sl, unescape(tok), true
		}
		c = a.own(c, sl)
		if c, sl, ok = child(c, tok); !ok {
			return nil, slot{}, "", false
		}
	}
}

// add is evanphx's container add: set a map's key, insert into an array
// (which becomes a new slice held at sl).
func (a *applier) add(c any, sl slot, key string, v any) error {
	switch t := c.(type) {
	case map[string]any:
		a.put(a.own(t, sl).(map[string]any), key, v)
		return nil
	case []any:
		idx := len(t)
		if key != "-" {
			var err error
			if idx, err = strconv.Atoi(key); err != nil {
				return fmt.Errorf("value was not a proper array index: '%s': %w", key, err)
			}
			n := len(t) + 1
			if idx >= n {
				return invalidIndex(idx)
			}
			if idx < 0 {
				if idx < -n {
					return invalidIndex(idx)
				}
				idx += n
			}
		}
		s := make([]any, len(t)+1)
		copy(s, t[:idx])
		s[idx] = v
		copy(s[idx+1:], t[idx:])
		a.made(s)
		a.store(sl, s)
		a.changes++
		return nil
	}
	return nil // rawNull: the callers fail first
}

// remove is evanphx's container remove.
func (a *applier) remove(c any, sl slot, key string) error {
	switch t := c.(type) {
	case map[string]any:
		if _, ok := t[key]; !ok {
			return fmt.Errorf("Unable to remove nonexistent key: %s: missing value", key) //nolint:staticcheck // ST1005: evanphx/json-patch's message, word for word
		}
		a.delKey(a.own(t, sl).(map[string]any), key)
		a.changes++
		a.destructive++
		return nil
	case []any:
		idx, err := strconv.Atoi(key)
		if err != nil {
			return err
		}
		if idx >= len(t) {
			return invalidIndex(idx)
		}
		if idx < 0 {
			if idx < -len(t) {
				return invalidIndex(idx)
			}
			idx += len(t)
		}
		s := make([]any, len(t)-1)
		copy(s, t[:idx])
		copy(s[idx:], t[idx+1:])
		a.made(s)
		a.store(sl, s)
		a.changes++
		a.destructive++
		return nil
	}
	return fmt.Errorf("Unable to remove nonexistent key: %s: missing value", key) //nolint:staticcheck // ST1005: evanphx/json-patch's message, word for word (rawNull)
}

// nullWrite is the error for a write into a rawNull, where evanphx assigns
// to a nil map and panics.
func nullWrite(op, p string) error {
	return fmt.Errorf("JSON Patch: %s operation does not apply: %s is inside null: %w", op, p, ErrPanic)
}

func (a *applier) apply(op *Op) error {
	kind := op.Op
	if quoteError(kind) != "" {
		kind = "unknown" // evanphx's Kind() when "op" does not decode
	}
	switch kind {
	case "add":
		return a.addOp(op)
	case "remove":
		return a.removeOp(op)
	case "replace":
		return a.replaceOp(op)
	case "move":
		return a.moveOp(op)
	case "test":
		return a.testOp(op)
	case "copy":
		return a.copyOp(op)
	}
	return fmt.Errorf("JSON Patch: Unexpected kind: %s", kind)
}

func (a *applier) addOp(op *Op) error {
	if quoteError(op.Path) != "" {
		return errors.New("JSON Patch: add operation failed to decode path: missing value")
	}
	c, sl, key, ok := a.findMut(op.Path)
	if !ok {
		return fmt.Errorf("JSON Patch: add operation does not apply: doc is missing path: \"%s\": missing value", op.Path)
	}
	if kindOf(c) == kRawNull {
		return nullWrite("add", op.Path)
	}
	if err := a.add(c, sl, key, a.value(op)); err != nil {
		return fmt.Errorf("JSON Patch: error in add for path: '%s': %w", op.Path, err)
	}
	return nil
}

func (a *applier) removeOp(op *Op) error {
	if quoteError(op.Path) != "" {
		return errors.New("JSON Patch: remove operation failed to decode path: missing value")
	}
	c, sl, key, ok := a.findMut(op.Path)
	if !ok {
		return fmt.Errorf("JSON Patch: remove operation does not apply: doc is missing path: \"%s\": missing value", op.Path)
	}
	if err := a.remove(c, sl, key); err != nil {
		return fmt.Errorf("JSON Patch: error in remove for path: '%s': %w", op.Path, err)
	}
	return nil
}

func (a *applier) replaceOp(op *Op) error {
	if e := quoteError(op.Path); e != "" {
		return errors.New("JSON Patch: replace operation failed to decode path: " + e)
	}
	if op.Path == "" {
		old := a.root
		switch kindOf(op.Value) {
		case kMap, kArray:
			a.root = op.Value
		case kNull:
			a.root = rawNull{}
		default:
			if _, ok := op.Value.(NoValue); ok {
				return fmt.Errorf("JSON Patch: replace operation has no value to replace the document with: %w", ErrPanic)
			}
			return errors.New("JSON Patch: replace operation value must be object or array: %!w(<nil>)")
		}
		a.replaced(old, a.root)
		return nil
	}
	c, sl, key, ok := a.findMut(op.Path)
	if !ok {
		return fmt.Errorf("JSON Patch: replace operation does not apply: doc is missing path: %s: missing value", op.Path)
	}
	switch t := c.(type) {
	case map[string]any:
		a.put(a.own(t, sl).(map[string]any), key, a.value(op))
	case []any:
		i, err := index(key, len(t))
		if err != nil {
			return fmt.Errorf("JSON Patch: replace operation does not apply: doc is missing key: %s: missing value", op.Path)
		}
		s := a.own(t, sl).([]any)
		old := s[i]
		v := a.value(op)
		a.setIndex(s, i, v)
		a.replaced(old, v)
	default:
		return nullWrite("replace", op.Path)
	}
	return nil
}

// fromError is the error text of a from member that evanphx cannot read, or
// "".
func fromError(from string) string {
	if from == "" {
		return "operation, missing from field: missing value"
	}
	return quoteError(from)
}

func (a *applier) moveOp(op *Op) error {
	if e := fromError(op.From); e != "" {
		return errors.New("JSON Patch: move operation failed to decode from: " + e)
	}
	c, sl, key, ok := a.findMut(op.From)
	if !ok {
		return fmt.Errorf("JSON Patch: move operation does not apply: doc is missing from path: %s: missing value", op.From)
	}
	v, err := get(c, key)
	if err == nil {
		err = a.remove(c, sl, key)
	}
	if err != nil {
		return fmt.Errorf("JSON Patch: error in move for path: '%s': %w", key, err)
	}
	if e := quoteError(op.Path); e != "" {
		return errors.New("JSON Patch: move operation failed to decode path: " + e)
	}
	c, sl, key, ok = a.findMut(op.Path)
	if !ok {
		return fmt.Errorf("JSON Patch: move operation does not apply: doc is missing destination path: %s: missing value", op.Path)
	}
	if kindOf(c) == kRawNull {
		return nullWrite("move", op.Path)
	}
	if err := a.add(c, sl, key, v); err != nil {
		return fmt.Errorf("JSON Patch: error in move for path: '%s': %w", op.Path, err)
	}
	return nil
}

func (a *applier) copyOp(op *Op) error {
	if e := fromError(op.From); e != "" {
		return errors.New("JSON Patch: copy operation failed to decode from: " + e)
	}
	c, key, ok := a.find(op.From)
	if !ok {
		return fmt.Errorf("JSON Patch: copy operation does not apply: doc is missing from path: %s: missing value", op.From)
	}
	v, err := get(c, key)
	if err != nil {
		return fmt.Errorf("JSON Patch: error in copy for from: '%s': %w", op.From, err)
	}
	if quoteError(op.Path) != "" {
		return errors.New("JSON Patch: copy operation failed to decode path: missing value")
	}
	c, sl, key, ok := a.findMut(op.Path)
	if !ok {
		return fmt.Errorf("JSON Patch: copy operation does not apply: doc is missing destination path: %s: missing value", op.Path)
	}
	if a.limit > 0 {
		// evanphx counts the JSON size of the copy: a missing or null
		// value is no bytes, a null set by an operation "null".
		if kindOf(v) != kNull {
			b, err := appendJSON(a.buf[:0], v)
			if err != nil {
				return fmt.Errorf("JSON Patch: error while performing deep copy: %w", err)
			}
			a.buf = b
			a.copied += int64(len(b))
		}
		if a.copied > a.limit {
			return fmt.Errorf("JSON Patch: Unable to complete the copy, the accumulated size increase of copy is %d, exceeding the limit %d", a.copied, a.limit)
		}
	}
	if kindOf(c) == kRawNull {
		return nullWrite("copy", op.Path)
	}
	if err := a.add(c, sl, key, a.clone(v, true)); err != nil {
		return fmt.Errorf("JSON Patch: error while adding value during copy: %w", err)
	}
	return nil
}

// clone copies what the applier owns of v, so that the copy and the
// original do not share a container it may change in place; the rest (the
// object's and the values' containers, which it never changes) is shared. As
// evanphx's deep copy (through JSON), a rawNull nested in the copy becomes a
// nil.
func (a *applier) clone(v any, top bool) any {
	switch t := v.(type) {
	case map[string]any:
		if !a.owned.has(identity(t)) {
			return t
		}
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[k] = a.clone(e, false)
		}
		a.made(m)
		return m
	case []any:
		if !a.owned.has(identity(t)) {
			return t
		}
		s := make([]any, len(t))
		for i, e := range t {
			s[i] = a.clone(e, false)
		}
		a.made(s)
		return s
	case rawNull:
		if top {
			return t
		}
		return nil
	}
	return v
}

// clean replaces the rawNulls of the document by nils: they are all in
// containers the applier owns (or are the root).
func (a *applier) clean(v any) any {
	switch t := v.(type) {
	case map[string]any:
		if a.owned.has(identity(t)) {
			for k, e := range t {
				switch kindOf(e) {
				case kRawNull:
					t[k] = nil
				case kMap, kArray:
					a.clean(e)
				}
			}
		}
	case []any:
		if a.owned.has(identity(t)) {
			for i, e := range t {
				switch kindOf(e) {
				case kRawNull:
					t[i] = nil
				case kMap, kArray:
					a.clean(e)
				}
			}
		}
	}
	return v
}

func (a *applier) testOp(op *Op) error {
	if e := quoteError(op.Path); e != "" {
		return errors.New("JSON Patch: test operation failed to decode path: " + e)
	}
	_, absent := op.Value.(NoValue)
	want := op.Value
	if kindOf(want) == kNull {
		want = rawNull{} // a null value is a "null" literal
	}
	if op.Path == "" {
		if absent {
			return fmt.Errorf("JSON Patch: test operation has no value to test the document against: %w", ErrPanic)
		}
		return a.compare(op.Path, a.root, want)
	}
	c, key, ok := a.find(op.Path)
	if !ok {
		return fmt.Errorf("JSON Patch: test operation does not apply: is missing path: %s: missing value", op.Path)
	}
	v, err := get(c, key)
	if err != nil {
		return fmt.Errorf("JSON Patch: error in test for path: '%s': %w", op.Path, err)
	}
	if kindOf(v) == kNull {
		if absent {
			return nil
		}
		return errTestFailed
	}
	if absent {
		return errTestFailed
	}
	return a.compare(op.Path, v, want)
}

func (a *applier) compare(p string, v, want any) error {
	switch equal(v, want) {
	case eqTrue:
		return nil
	case eqPanic:
		return fmt.Errorf("JSON Patch: testing value %s compares arrays with a null element: %w", p, ErrPanic)
	}
	return errTestFailed
}
