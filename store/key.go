package store

import (
	"bytes"
	"cmp"
	"fmt"
	"strings"
)

// MaxKeyPartLen is the maximum length in bytes of each of a Key's four parts.
const MaxKeyPartLen = 1024

// Key identifies an object: API group (without version), kind, namespace and
// name. Group is "" for the core group, Namespace is "" for cluster-scoped
// objects. Kind and Name are required; no part may contain '/' or NUL, which
// makes Key.String unambiguous (Kubernetes forbids '/' in names too).
type Key struct {
	Group     string
	Kind      string
	Namespace string
	Name      string
}

// String renders the key as "group/Kind/namespace/name", for example
// "policies.kyverno.io/ValidatingPolicy//require-labels" or "/Namespace//default"
// (core group, cluster-scoped). ParseKey is its inverse for valid keys.
func (k Key) String() string {
	return k.Group + "/" + k.Kind + "/" + k.Namespace + "/" + k.Name
}

// ParseKey parses the form produced by Key.String and validates the result.
func ParseKey(s string) (Key, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 4 {
		return Key{}, fmt.Errorf("%w: key %q: want group/Kind/namespace/name", ErrInvalid, s)
	}
	k := Key{Group: parts[0], Kind: parts[1], Namespace: parts[2], Name: parts[3]}
	if err := k.Validate(); err != nil {
		return Key{}, err
	}
	return k, nil
}

// Validate reports whether k can be stored: Kind and Name non-empty, every part
// at most MaxKeyPartLen bytes and free of '/' and NUL. Errors wrap ErrInvalid.
func (k Key) Validate() error {
	if k.Kind == "" {
		return fmt.Errorf("%w: key %q: kind is empty", ErrInvalid, k.String())
	}
	if k.Name == "" {
		return fmt.Errorf("%w: key %q: name is empty", ErrInvalid, k.String())
	}
	for _, p := range [...]struct{ field, v string }{
		{"group", k.Group}, {"kind", k.Kind}, {"namespace", k.Namespace}, {"name", k.Name},
	} {
		if len(p.v) > MaxKeyPartLen {
			return fmt.Errorf("%w: key %q: %s longer than %d bytes", ErrInvalid, k.String(), p.field, MaxKeyPartLen)
		}
		if strings.ContainsAny(p.v, "/\x00") {
			return fmt.Errorf("%w: key %q: %s contains '/' or NUL", ErrInvalid, k.String(), p.field)
		}
	}
	return nil
}

// compareKeys orders keys by group, kind, namespace, name. Because no part
// contains NUL, this is also the byte order of their encodings (appendKey).
func compareKeys(a, b Key) int {
	if c := cmp.Compare(a.Group, b.Group); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Kind, b.Kind); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// appendKey appends the storage encoding of k: group NUL kind NUL namespace NUL name.
func appendKey(dst []byte, k Key) []byte {
	dst = append(dst, k.Group...)
	dst = append(dst, 0)
	dst = append(dst, k.Kind...)
	dst = append(dst, 0)
	dst = append(dst, k.Namespace...)
	dst = append(dst, 0)
	return append(dst, k.Name...)
}

// interner deduplicates the few distinct group, kind and namespace strings
// met while decoding many keys, so each costs one allocation per call.
type interner map[string]string

func (in interner) str(b []byte) string {
	if in == nil {
		return string(b)
	}
	if s, ok := in[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(in) < 4096 {
		in[s] = s
	}
	return s
}

// decodeKey is the inverse of appendKey.
func decodeKey(b []byte, in interner) (Key, error) {
	var parts [3][]byte
	rest := b
	for i := range parts {
		j := bytes.IndexByte(rest, 0)
		if j < 0 {
			return Key{}, fmt.Errorf("%w: malformed object key %q", ErrCorrupt, b)
		}
		parts[i], rest = rest[:j], rest[j+1:]
	}
	if bytes.IndexByte(rest, 0) >= 0 || len(parts[1]) == 0 || len(rest) == 0 {
		return Key{}, fmt.Errorf("%w: malformed object key %q", ErrCorrupt, b)
	}
	return Key{Group: in.str(parts[0]), Kind: in.str(parts[1]), Namespace: in.str(parts[2]), Name: string(rest)}, nil
}
