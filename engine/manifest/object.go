package manifest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
)

// Object is one Kubernetes-shaped object: a policy, an exception, a
// Namespace, a param, or a resource to evaluate.
type Object struct {
	APIVersion string
	Kind       string
	Namespace  string
	Name       string
	// Source names where the object came from (file and document), for messages.
	Source string
	// Content is the object as JSON-shaped data. It must not be modified
	// once the object is handed to the engine.
	Content map[string]any
	// Version identifies this content of the object (for example a hash of
	// its stored bytes); the compiler reuses what it compiled for the same
	// identity and version. Empty means "compute it from Content".
	Version string

	id string
}

// NewObject wraps JSON-shaped content.
func NewObject(source string, content map[string]any) *Object {
	o := &Object{Source: source, Content: content}
	o.APIVersion, _ = content["apiVersion"].(string)
	o.Kind, _ = content["kind"].(string)
	if md, ok := content["metadata"].(map[string]any); ok {
		o.Name, _ = md["name"].(string)
		o.Namespace, _ = md["namespace"].(string)
	}
	if o.Name == "" && o.Kind == podSecurityConfigurationKind && o.Group() == podSecurityConfigurationGroup {
		// The upstream format has no metadata; the store names objects.
		o.Name = PodSecurityConfigurationName
	}
	o.id = o.Group() + "/" + o.Kind + "/" + o.Namespace + "/" + o.Name
	return o
}

// PodSecurityConfigurationName is the name of a PodSecurityConfiguration
// without metadata.name (the upstream format has no metadata), under
// which it is stored.
const PodSecurityConfigurationName = "default"

const (
	podSecurityConfigurationGroup = "pod-security.admission.config.k8s.io"
	podSecurityConfigurationKind  = "PodSecurityConfiguration"
)

// ID identifies the object among others: group/kind/namespace/name.
func (o *Object) ID() string {
	if o.id == "" {
		return o.Group() + "/" + o.Kind + "/" + o.Namespace + "/" + o.Name
	}
	return o.id
}

// ContentVersion returns Version, or a hash of the content when it is empty.
func (o *Object) ContentVersion() string {
	if o.Version != "" {
		return o.Version
	}
	sum := sha256.Sum256(CanonicalJSON(o.Content))
	return hex.EncodeToString(sum[:])
}

// FromDocuments converts manifest documents to objects.
func FromDocuments(docs []*Document) []*Object {
	out := make([]*Object, len(docs))
	for i, d := range docs {
		out[i] = NewObject(d.Source(), d.Object)
	}
	return out
}

// Group returns the API group of the object ("" for the core group).
func (o *Object) Group() string {
	if i := strings.IndexByte(o.APIVersion, '/'); i >= 0 {
		return o.APIVersion[:i]
	}
	return ""
}

// GroupVersion returns the API version part after the group.
func (o *Object) VersionOnly() string {
	if i := strings.IndexByte(o.APIVersion, '/'); i >= 0 {
		return o.APIVersion[i+1:]
	}
	return o.APIVersion
}

// Ref names the object: "Kind namespace/name" or "Kind name".
func (o *Object) Ref() string {
	if o.Namespace != "" {
		return fmt.Sprintf("%s %s/%s", o.Kind, o.Namespace, o.Name)
	}
	return fmt.Sprintf("%s %s", o.Kind, o.Name)
}

// Labels returns metadata.labels.
func (o *Object) Labels() map[string]string {
	return MetadataStrings(o.Content, "labels")
}

// Annotations returns metadata.annotations.
func (o *Object) Annotations() map[string]string {
	return MetadataStrings(o.Content, "annotations")
}

// MetadataStrings returns the string entries of metadata.<key> (labels,
// annotations) of an object, or nil when there are none.
func MetadataStrings(content map[string]any, key string) map[string]string {
	md, _ := content["metadata"].(map[string]any)
	m, _ := md[key].(map[string]any)
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

// LoadError is an object that cannot be loaded or compiled. It names the
// source, the object and the field.
type LoadError struct {
	Source string
	// Object is "Kind namespace/name" or "Kind name".
	Object string
	// Field is the path of the offending field, e.g. spec.validations[0].expression.
	Field  string
	Detail string
}

func (e *LoadError) Error() string {
	var b strings.Builder
	if e.Source != "" {
		b.WriteString(e.Source)
		b.WriteString(": ")
	}
	if e.Object != "" {
		b.WriteString(e.Object)
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Detail)
	return b.String()
}

// Errorf returns the load error of field of object o.
func Errorf(o *Object, field, format string, args ...any) *LoadError {
	return &LoadError{Source: o.Source, Object: o.Ref(), Field: field, Detail: fmt.Sprintf(format, args...)}
}

// LoadErrors is the list of every object that could not be loaded.
type LoadErrors []*LoadError

func (l LoadErrors) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// AsLoadErrors returns the load errors in err, if any.
func AsLoadErrors(err error) LoadErrors {
	var l LoadErrors
	if errors.As(err, &l) {
		return l
	}
	var one *LoadError
	if errors.As(err, &one) {
		return LoadErrors{one}
	}
	return nil
}

// DecodeStrict decodes content into v, refusing unknown and duplicate
// fields, and reports the first problem with its field path.
func DecodeStrict(o *Object, v any) *LoadError {
	data, err := json.Marshal(o.Content)
	if err != nil {
		return Errorf(o, "", "cannot encode: %v", err)
	}
	strict, err := sigsjson.UnmarshalStrict(data, v)
	if err != nil {
		field := jsonErrorField(err)
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field = indexedPath(o.Content, field, te.Value)
		}
		return Errorf(o, field, "%s", jsonErrorDetail(err))
	}
	if len(strict) > 0 {
		return Errorf(o, strictField(strict[0]), "%s", strictDetail(strict[0]))
	}
	return nil
}

// strictField extracts the field path from a strict-decoding error such as
// `unknown field "spec.foo"`.
func strictField(err error) string {
	msg := err.Error()
	if i := strings.IndexByte(msg, '"'); i >= 0 {
		if j := strings.LastIndexByte(msg, '"'); j > i {
			return msg[i+1 : j]
		}
	}
	return ""
}

func strictDetail(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "unknown field"):
		return "unknown field"
	case strings.Contains(msg, "duplicate field"):
		return "duplicate field"
	}
	return msg
}

func jsonErrorField(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return te.Field
	}
	return ""
}

func jsonErrorDetail(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("cannot be %s, expected %s", te.Value, jsonTypeName(te.Type.String()))
	}
	return err.Error()
}

func jsonTypeName(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case strings.HasPrefix(goType, "map["), strings.Contains(goType, "."):
		if strings.HasSuffix(goType, "Time") {
			return "an RFC 3339 time"
		}
		if strings.HasSuffix(goType, "Type") || strings.HasSuffix(goType, "Action") {
			return "a string"
		}
		return "an object"
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "a boolean"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "*int"):
		return "an integer"
	}
	return goType
}

// CanonicalJSON renders content deterministically (encoding/json sorts map keys).
func CanonicalJSON(content map[string]any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(content)
	return bytes.TrimSpace(buf.Bytes())
}

// indexedPath turns a dotted field path without list indices (as
// encoding/json reports type errors) into the path of the first value of
// kind jsonKind found there, with indices: spec.matchConditions[0].name.
func indexedPath(content map[string]any, dotted, kind string) string {
	parts := strings.Split(dotted, ".")
	var walk func(v any, i int, prefix string) (string, bool)
	walk = func(v any, i int, prefix string) (string, bool) {
		if i == len(parts) {
			return prefix, jsonKind(v) == kind
		}
		if l, ok := v.([]any); ok {
			for idx, e := range l {
				if p, ok := walk(e, i, fmt.Sprintf("%s[%d]", prefix, idx)); ok {
					return p, true
				}
			}
			return "", false
		}
		m, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		child, ok := m[parts[i]]
		if !ok {
			return "", false
		}
		next := parts[i]
		if prefix != "" {
			next = prefix + "." + parts[i]
		}
		return walk(child, i+1, next)
	}
	if p, ok := walk(content, 0, ""); ok {
		return p
	}
	return dotted
}

func jsonKind(v any) string {
	switch v.(type) {
	case bool:
		return "bool"
	case string:
		return "string"
	case int64, float64:
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "null"
}

// FieldErrors converts the field errors of an API validation of o.
func FieldErrors(o *Object, errs field.ErrorList) LoadErrors {
	out := make(LoadErrors, len(errs))
	for i, e := range errs {
		out[i] = &LoadError{Source: o.Source, Object: o.Ref(), Field: e.Field, Detail: e.ErrorBody()}
	}
	return out
}
