package authz

import (
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// Prepare returns the `object` of an authorization request: a copy of the
// request's JSON with what the message kyverno-authz evaluates would have
// — the fields a policy may read without testing them, at their zero
// values — and, for Envoy, the fields named by their protobuf names (the
// CEL names: context_extensions, socket_address, port_value, ...) whether
// the JSON gives those or protobuf's lowerCamelCase JSON names, with
// int64 fields (given as JSON strings) as integers, bytes fields (base64)
// as bytes and timestamps as timestamps. Fields it does not know are kept
// as they are. It returns the sizes of the object for the cost estimates,
// and an error when a field is not of its type.
func Prepare(shape admission.Shape, obj map[string]any) (map[string]any, manifest.Sizes, error) {
	var out map[string]any
	var err error
	switch shape {
	case admission.ShapeEnvoy:
		out, err = envoyCheckRequest.normalize(obj, "")
	case admission.ShapeHTTP:
		out, err = httpCheckRequest.normalize(obj, "")
	default:
		return obj, manifest.SizesOf(obj), nil
	}
	if err != nil {
		return nil, manifest.Sizes{}, err
	}
	sizes := manifest.SizesOf(out)
	// Bytes values (bodies) are not JSON: bound them by their encoded
	// length, which SizesOf saw in the request.
	return out, sizes.Max(manifest.SizesOf(obj)), nil
}

// fieldKind is the type of a field of a message.
type fieldKind int

const (
	kString fieldKind = iota
	kInt              // int64, uint32, ...: a JSON number or a string of digits
	kBool
	kBytes      // base64
	kTime       // RFC 3339
	kMessage    // a nested message (sub)
	kMessages   // a list of messages (sub)
	kStringMap  // map<string, string>
	kStringsMap // map<string, list of strings> (the HTTP request's header and query)
	kStruct     // google.protobuf.Struct or a map of them: kept as it is
	kEnum       // an enum: a name (enum) or a number
)

type field struct {
	name string // the protobuf (CEL) name
	kind fieldKind
	sub  *message
	enum map[string]int64
	// noDefault leaves the field out when the request does not have it (a
	// timestamp, whose zero is not the zero of JSON).
	noDefault bool
}

// message is the schema of a message: its fields by every JSON name
// (protobuf's lowerCamelCase name and the field's own name).
type message struct {
	fields []field
	byName map[string]*field
}

func newMessage(fields ...field) *message {
	m := &message{fields: fields, byName: map[string]*field{}}
	for i := range m.fields {
		f := &m.fields[i]
		m.byName[f.name] = f
		m.byName[lowerCamel(f.name)] = f
	}
	return m
}

// lowerCamel is protobuf's JSON name of a field.
func lowerCamel(name string) string {
	out := make([]byte, 0, len(name))
	upper := false
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_':
			upper = true
		case upper && 'a' <= c && c <= 'z':
			out = append(out, c-'a'+'A')
			upper = false
		default:
			out = append(out, c)
			upper = false
		}
	}
	return string(out)
}

// The Envoy CheckRequest (envoy.service.auth.v3, envoy.config.core.v3).
var envoyCheckRequest = func() *message {
	socketAddress := newMessage(
		field{name: "protocol", kind: kEnum, enum: map[string]int64{"TCP": 0, "UDP": 1}},
		field{name: "address"},
		field{name: "port_value", kind: kInt},
		field{name: "named_port"},
		field{name: "resolver_name"},
		field{name: "ipv4_compat", kind: kBool},
	)
	address := newMessage(
		field{name: "socket_address", kind: kMessage, sub: socketAddress},
		field{name: "pipe", kind: kMessage, sub: newMessage(field{name: "path"}, field{name: "mode", kind: kInt})},
		field{name: "envoy_internal_address", kind: kMessage, sub: newMessage(field{name: "server_listener_name"}, field{name: "endpoint_id"})},
	)
	peer := newMessage(
		field{name: "address", kind: kMessage, sub: address},
		field{name: "service"},
		field{name: "labels", kind: kStringMap},
		field{name: "principal"},
		field{name: "certificate"},
	)
	headerValue := newMessage(field{name: "key"}, field{name: "value"}, field{name: "raw_value", kind: kBytes})
	httpRequest := newMessage(
		field{name: "id"},
		field{name: "method"},
		field{name: "headers", kind: kStringMap},
		field{name: "header_map", kind: kMessage, sub: newMessage(field{name: "headers", kind: kMessages, sub: headerValue})},
		field{name: "path"},
		field{name: "host"},
		field{name: "scheme"},
		field{name: "query"},
		field{name: "fragment"},
		field{name: "size", kind: kInt},
		field{name: "protocol"},
		field{name: "body"},
		field{name: "raw_body", kind: kBytes},
	)
	metadata := newMessage(
		field{name: "filter_metadata", kind: kStruct},
		field{name: "typed_filter_metadata", kind: kStruct},
	)
	attributes := newMessage(
		field{name: "source", kind: kMessage, sub: peer},
		field{name: "destination", kind: kMessage, sub: peer},
		field{name: "request", kind: kMessage, sub: newMessage(
			field{name: "time", kind: kTime, noDefault: true},
			field{name: "http", kind: kMessage, sub: httpRequest},
		)},
		field{name: "context_extensions", kind: kStringMap},
		field{name: "metadata_context", kind: kMessage, sub: metadata},
		field{name: "route_metadata_context", kind: kMessage, sub: metadata},
		field{name: "tls_session", kind: kMessage, sub: newMessage(field{name: "sni"})},
	)
	return newMessage(field{name: "attributes", kind: kMessage, sub: attributes})
}()

// The Authz Server's HTTP CheckRequest (kyverno-authz
// pkg/cel/libs/authz/http: Go fields with JSON names, body as base64).
var httpCheckRequest = newMessage(field{name: "attributes", kind: kMessage, sub: newMessage(
	field{name: "method"},
	field{name: "header", kind: kStringsMap},
	field{name: "host"},
	field{name: "protocol"},
	field{name: "contentLength", kind: kInt},
	field{name: "body", kind: kBytes},
	field{name: "scheme"},
	field{name: "path"},
	field{name: "query", kind: kStringsMap},
	field{name: "fragment"},
)})

// normalize returns a copy of obj with the message's fields renamed,
// converted and defaulted; path names obj in errors.
func (m *message) normalize(obj map[string]any, path string) (map[string]any, error) {
	out := make(map[string]any, max(len(obj), len(m.fields)))
	for k, v := range obj {
		f, ok := m.byName[k]
		if !ok {
			out[k] = v
			continue
		}
		if v == nil {
			continue // null is the default
		}
		cv, err := f.convert(v, path+f.name)
		if err != nil {
			return nil, err
		}
		out[f.name] = cv
	}
	for i := range m.fields {
		f := &m.fields[i]
		if _, ok := out[f.name]; ok || f.noDefault {
			continue
		}
		d, err := f.convert(nil, path+f.name)
		if err != nil {
			return nil, err
		}
		out[f.name] = d
	}
	return out, nil
}

// convert converts a field's value (nil: its default).
func (f *field) convert(v any, path string) (any, error) {
	bad := func() error { return fmt.Errorf("%s: not a valid %s: %v", path, f.kindName(), v) }
	switch f.kind {
	case kString:
		if v == nil {
			return "", nil
		}
		if _, ok := v.(string); !ok {
			return nil, bad()
		}
		return v, nil
	case kBool:
		if v == nil {
			return false, nil
		}
		if _, ok := v.(bool); !ok {
			return nil, bad()
		}
		return v, nil
	case kInt, kEnum:
		switch t := v.(type) {
		case nil:
			return int64(0), nil
		case int64:
			return t, nil
		case int:
			return int64(t), nil
		case float64:
			if t != math.Trunc(t) || math.Abs(t) > 1<<53 {
				return nil, bad()
			}
			return int64(t), nil
		case string:
			if f.kind == kEnum {
				if n, ok := f.enum[t]; ok {
					return n, nil
				}
			}
			n, err := strconv.ParseInt(t, 10, 64)
			if err != nil {
				return nil, bad()
			}
			return n, nil
		}
		return nil, bad()
	case kBytes:
		switch t := v.(type) {
		case nil:
			return []byte{}, nil
		case string:
			b, err := base64.StdEncoding.DecodeString(t)
			if err != nil {
				if b, err = base64.URLEncoding.DecodeString(t); err != nil {
					return nil, bad()
				}
			}
			return b, nil
		case []byte:
			return t, nil
		}
		return nil, bad()
	case kTime:
		s, ok := v.(string)
		if !ok {
			return nil, bad()
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return nil, bad()
		}
		return t, nil
	case kMessage:
		if v == nil {
			return f.sub.normalize(nil, path+".")
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, bad()
		}
		return f.sub.normalize(m, path+".")
	case kMessages:
		if v == nil {
			return []any{}, nil
		}
		l, ok := v.([]any)
		if !ok {
			return nil, bad()
		}
		out := make([]any, len(l))
		for i, e := range l {
			m, ok := e.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s[%d]: not a valid message: %v", path, i, e)
			}
			var err error
			if out[i], err = f.sub.normalize(m, fmt.Sprintf("%s[%d].", path, i)); err != nil {
				return nil, err
			}
		}
		return out, nil
	case kStringMap, kStringsMap, kStruct:
		if v == nil {
			return map[string]any{}, nil
		}
		if _, ok := v.(map[string]any); !ok {
			return nil, bad()
		}
		return v, nil
	}
	return v, nil
}

func (f *field) kindName() string {
	switch f.kind {
	case kInt:
		return "integer"
	case kBool:
		return "bool"
	case kBytes:
		return "base64 string"
	case kTime:
		return "RFC 3339 timestamp"
	case kMessage, kMessages:
		return "message"
	case kStringMap, kStringsMap, kStruct:
		return "map"
	case kEnum:
		return "enum"
	}
	return "string"
}
