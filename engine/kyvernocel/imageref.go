package kyvernocel

import (
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// image reference library (sdk extensions/cel/libs/image):
//
//	parseImageReference(string) → kyverno.image   (image(string) is the deprecated alias)
//	isImage(string)             → bool
//	<image>.containsDigest() bool, .registry(), .repository(), .identifier(),
//	.identifierWithSeparator(), .tag(), .digest() string
//
// Parsing is go-containerregistry's name.ParseReference (v0.21.8, the version
// Kyverno 1.19.1 links) with its default options: weak validation, default
// registry index.docker.io (docker.io is rewritten to it), default tag latest.

// ImageReferenceLibrary declares Kyverno's image reference functions
// (image(), isImage(), and the members of kyverno.image) alone: the
// environment of ImageValidatingPolicies' matchImageReferences expressions.
func ImageReferenceLibrary() []cel.EnvOption { return imageRefFunctions() }

func imageRefFunctions() []cel.EnvOption {
	return []cel.EnvOption{
		cel.Function("image",
			cel.Overload("string_to_image_deprecated", []*cel.Type{cel.StringType}, ImageType,
				cel.UnaryBinding(stringToImage))),
		cel.Function("parseImageReference",
			cel.Overload("string_to_image", []*cel.Type{cel.StringType}, ImageType,
				cel.UnaryBinding(stringToImage))),
		cel.Function("isImage",
			cel.Overload("is_image_string", []*cel.Type{cel.StringType}, cel.BoolType,
				cel.UnaryBinding(isImage))),
		cel.Function("containsDigest",
			cel.MemberOverload("image_contains_digest", []*cel.Type{ImageType}, cel.BoolType,
				cel.UnaryBinding(imageMember(func(r *ImageReference) ref.Val { return types.Bool(r.isDigest && r.digest != "") })))),
		cel.Function("registry",
			cel.MemberOverload("image_registry", []*cel.Type{ImageType}, cel.StringType,
				cel.UnaryBinding(imageMember(func(r *ImageReference) ref.Val { return types.String(r.registry) })))),
		cel.Function("repository",
			cel.MemberOverload("image_repository", []*cel.Type{ImageType}, cel.StringType,
				cel.UnaryBinding(imageMember(func(r *ImageReference) ref.Val { return types.String(r.RepositoryStr()) })))),
		cel.Function("identifier",
			cel.MemberOverload("image_identifier", []*cel.Type{ImageType}, cel.StringType,
				cel.UnaryBinding(imageMember(func(r *ImageReference) ref.Val { return types.String(r.identifierWithTag()) })))),
		cel.Function("identifierWithSeparator",
			cel.MemberOverload("image_identifier_with_separator", []*cel.Type{ImageType}, cel.StringType,
				cel.UnaryBinding(imageMember(func(r *ImageReference) ref.Val {
					if r.isDigest {
						return types.String("@" + r.digest)
					}
					return types.String(":" + r.tag)
				})))),
		cel.Function("tag",
			cel.MemberOverload("image_tag", []*cel.Type{ImageType}, cel.StringType,
				cel.UnaryBinding(imageMember(func(r *ImageReference) ref.Val { return types.String(r.Tag()) })))),
		cel.Function("digest",
			cel.MemberOverload("image_digest", []*cel.Type{ImageType}, cel.StringType,
				cel.UnaryBinding(imageMember(func(r *ImageReference) ref.Val {
					if r.isDigest {
						return types.String(r.digest)
					}
					return types.String("")
				})))),
	}
}

func imageMember(f func(*ImageReference) ref.Val) func(ref.Val) ref.Val {
	return func(arg ref.Val) ref.Val {
		r, ok := arg.(imageVal)
		if !ok {
			return types.MaybeNoSuchOverloadErr(arg)
		}
		return f(r.ref)
	}
}

func stringToImage(arg ref.Val) ref.Val {
	s, ok := arg.(types.String)
	if !ok {
		return types.MaybeNoSuchOverloadErr(arg)
	}
	r, err := ParseImageReference(string(s))
	if err != nil {
		return types.WrapErr(err)
	}
	return imageVal{r}
}

func isImage(arg ref.Val) ref.Val {
	s, ok := arg.(types.String)
	if !ok {
		return types.MaybeNoSuchOverloadErr(arg)
	}
	_, err := ParseImageReference(string(s))
	return types.Bool(err == nil)
}

// ImageReference is a parsed image reference: go-containerregistry's name.Tag
// or name.Digest, flattened. It is the Go value of a CEL kyverno.image.
type ImageReference struct {
	registry   string // never empty: defaulted, docker.io rewritten to index.docker.io
	repository string // as written (without the implicit "library/")
	tag        string // name.Tag: the tag, defaulted to latest
	digest     string // name.Digest: "sha256:<hex>"
	isDigest   bool
	original   string
}

const (
	defaultRegistry      = "index.docker.io"
	defaultRegistryAlias = "docker.io"
	defaultTag           = "latest"
	defaultNamespace     = "library"
	repositoryChars      = "abcdefghijklmnopqrstuvwxyz0123456789_-./"
	tagChars             = "abcdefghijklmnopqrstuvwxyz0123456789_-.ABCDEFGHIJKLMNOPQRSTUVWXYZ"
)

// ParseImageReference parses an image reference exactly as
// go-containerregistry's name.ParseReference does with default options (as
// Kyverno's parseImageReference does). The error is "could not parse
// reference: <s>".
func ParseImageReference(s string) (*ImageReference, error) {
	if t, err := newTag(s); err == nil {
		return t, nil
	}
	if d, err := newDigest(s); err == nil {
		return d, nil
	}
	return nil, fmt.Errorf("could not parse reference: %s", s)
}

// RepositoryStr is the repository with Docker Hub's implicit "library/".
func (r *ImageReference) RepositoryStr() string {
	if !strings.ContainsRune(r.repository, '/') && r.registry == defaultRegistry {
		return defaultNamespace + "/" + r.repository
	}
	return r.repository
}

// repositoryName is name.Repository.Name(): registry/repository.
func (r *ImageReference) repositoryName() string {
	return r.registry + "/" + r.RepositoryStr()
}

// Identifier is name.Reference.Identifier(): the tag or the digest.
func (r *ImageReference) Identifier() string {
	if r.isDigest {
		return r.digest
	}
	return r.tag
}

// String is the reference as written.
func (r *ImageReference) String() string { return r.original }

// Tag is Kyverno's tag(): the tag of a tag reference, or the tag written
// before the digest of a repo:tag@digest reference ("" when there is none).
func (r *ImageReference) Tag() string {
	if !r.isDigest {
		return r.tag
	}
	return tagFromTaggedDigestReference(r.original)
}

// identifierWithTag is Kyverno's identifier(): Identifier(), except that a
// repo:tag@digest reference gives "tag@digest".
func (r *ImageReference) identifierWithTag() string {
	if r.isDigest {
		if tag := tagFromTaggedDigestReference(r.original); tag != "" {
			return tag + "@" + r.digest
		}
	}
	return r.Identifier()
}

func tagFromTaggedDigestReference(s string) string {
	i := strings.Index(s, "@")
	if i == -1 {
		return ""
	}
	before := s[:i]
	slash := strings.LastIndex(before, "/")
	j := strings.LastIndex(before, ":")
	if j == -1 || j < slash {
		return ""
	}
	return before[j+1:]
}

func checkElement(name, element, allowedRunes string, minRunes, maxRunes int) error {
	n := utf8.RuneCountInString(element)
	if n < minRunes || maxRunes < n {
		return fmt.Errorf("%s must be between %d and %d characters in length: %s", name, minRunes, maxRunes, element)
	}
	for _, c := range element {
		if !strings.ContainsRune(allowedRunes, c) {
			return fmt.Errorf("%s can only contain the characters `%s`: %s", name, allowedRunes, element)
		}
	}
	return nil
}

// simpleAuthority reports whether name is a host name with an optional
// numeric port: url.Parse("//"+name) accepts such a name unchanged as the
// host, so the check can skip the parse.
func simpleAuthority(name string) bool {
	colon := false
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', c == '.', c == '-':
			if colon {
				return false
			}
		case '0' <= c && c <= '9':
		case c == ':' && !colon && i+1 < len(name):
			colon = true
		default:
			return false
		}
	}
	return true
}

func newRegistry(name string) (string, error) {
	if simpleAuthority(name) {
		// valid as is
	} else if u, err := url.Parse("//" + name); err != nil || u.Host != name {
		return "", fmt.Errorf("registries must be valid RFC 3986 URI authorities: %s", name)
	}
	if name == "" {
		name = defaultRegistry
	}
	if name == defaultRegistryAlias {
		name = defaultRegistry
	}
	return name, nil
}

func newRepository(name string) (registry, repo string, err error) {
	if name == "" {
		return "", "", fmt.Errorf("a repository name must be specified")
	}
	repo = name
	if i := strings.IndexByte(name, '/'); i >= 0 {
		maybeRegistry := name[:i]
		if maybeRegistry == "localhost" || strings.ContainsAny(maybeRegistry, ".:") {
			registry, repo = maybeRegistry, name[i+1:]
		}
	}
	if err := checkElement("repository", repo, repositoryChars, 2, 255); err != nil {
		return "", "", err
	}
	if registry, err = newRegistry(registry); err != nil {
		return "", "", err
	}
	return registry, repo, nil
}

func newTag(name string) (*ImageReference, error) {
	base, tag := name, ""
	if i := strings.LastIndexByte(name, ':'); i >= 0 && !strings.Contains(name[i+1:], "/") {
		base, tag = name[:i], name[i+1:]
		if tag == "" {
			return nil, fmt.Errorf("%s must specify a tag name after the colon", name)
		}
	}
	if tag != "" {
		if err := checkElement("tag", tag, tagChars, 1, 128); err != nil {
			return nil, err
		}
	} else {
		tag = defaultTag
	}
	registry, repo, err := newRepository(base)
	if err != nil {
		return nil, err
	}
	return &ImageReference{registry: registry, repository: repo, tag: tag, original: name}, nil
}

func newDigest(name string) (*ImageReference, error) {
	parts := strings.Split(name, "@")
	if len(parts) != 2 {
		return nil, fmt.Errorf("a digest must contain exactly one '@' separator (e.g. registry/repository@digest) saw: %s", name)
	}
	base, dig := parts[0], parts[1]
	hex, ok := strings.CutPrefix(dig, "sha256:")
	if !ok {
		return nil, fmt.Errorf("unsupported digest algorithm: %s", dig)
	}
	if len(hex) != 64 {
		return nil, fmt.Errorf("invalid checksum digest length")
	}
	for i := 0; i < len(hex); i++ {
		if c := hex[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return nil, fmt.Errorf("invalid checksum digest format")
		}
	}
	if t, err := newTag(base); err == nil {
		base = t.repositoryName()
	}
	registry, repo, err := newRepository(base)
	if err != nil {
		return nil, err
	}
	return &ImageReference{registry: registry, repository: repo, digest: dig, isDigest: true, original: name}, nil
}

// Registry is the registry ("index.docker.io" when none is written).
func (r *ImageReference) Registry() string { return r.registry }

// IsDigest reports whether the reference is by digest.
func (r *ImageReference) IsDigest() bool { return r.isDigest }

// Digest is the digest of a digest reference ("" otherwise).
func (r *ImageReference) Digest() string {
	if r.isDigest {
		return r.digest
	}
	return ""
}

// MarshalJSON encodes the reference as written, as go-containerregistry's
// references do (json.marshal(image(x)) is "x" quoted).
func (r *ImageReference) MarshalJSON() ([]byte, error) { return json.Marshal(r.original) }

// ---- ref.Val ----

// imageVal is the CEL value of a kyverno.image.
type imageVal struct{ ref *ImageReference }

var imageRefGoType = reflect.TypeFor[*ImageReference]()

// ConvertToNative converts to the reference itself or to its string form.
func (v imageVal) ConvertToNative(t reflect.Type) (any, error) {
	switch t {
	case imageRefGoType:
		return v.ref, nil
	case stringType:
		return v.ref.original, nil
	}
	return nil, fmt.Errorf("type conversion error from 'Image' to '%v'", t)
}

// ConvertToType implements ref.Val. As in Kyverno, only the conversion to
// kyverno.image itself succeeds (so type(image(x)) is an error).
func (v imageVal) ConvertToType(t ref.Type) ref.Val {
	if t == ImageType {
		return v
	}
	return types.NewErr("type conversion error from '%s' to '%s'", ImageType, t)
}

// Equal is true when both references parsed from the same string (Kyverno
// compares the parsed go-containerregistry values, which keep that string).
func (v imageVal) Equal(other ref.Val) ref.Val {
	o, ok := other.(imageVal)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	return types.Bool(*v.ref == *o.ref)
}

// Type implements ref.Val.
func (v imageVal) Type() ref.Type { return ImageType }

// Value is the *ImageReference.
func (v imageVal) Value() any { return v.ref }
