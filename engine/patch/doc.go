// Package patch applies RFC 6902 JSON Patches to JSON-shaped objects
// (map[string]any, []any, string, bool, int64, float64, nil) without a
// JSON round trip, and computes the patch between two objects.
//
// # ApplyJSONPatch
//
// ApplyJSONPatch has the semantics of a MutatingAdmissionPolicy's (and a
// Kyverno MutatingPolicy's) JSONPatch mutation: gopkg.in/evanphx/json-patch.v4
// Patch.Apply with its default options, on a patch built as
// k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch/json_patch.go
// and Kyverno's pkg/cel/policies/mpol/compiler/json.go build it, applied to
// the JSON encoding of the object. In particular:
//
//   - A path is split at "/" after its first "/" (what precedes it is
//     ignored: "a/b" is "/b"; a path with no "/" does not apply), and each
//     token is unescaped, "~1" to "/" then "~0" to "~", left to right.
//   - Array indexes are parsed by strconv.Atoi ("+1" and "01" are 1);
//     negative indexes count from the end (SupportNegativeIndices): -1 is the
//     last element for remove, replace and test, and the end of the array for
//     add; "-" appends in add and is not an index anywhere else.
//   - add on a missing parent fails; add, replace and copy on an object set
//     the key whether or not it exists (replace of a missing key adds it);
//     remove of a missing key fails; copy from a missing key copies null.
//   - move removes the source before it looks the destination up, so moving a
//     value into itself fails as a missing destination.
//   - test compares as evanphx does: objects by their keys, arrays by their
//     elements, scalars by their JSON text. A JSON null value (Op.Value nil)
//     is equal to {} and, against an array, to []; a test with no value
//     (NoValue) passes on a missing or null target.
//   - A null set by an operation is a JSON null that evanphx holds as a
//     "null" literal: a later path through it finds an empty object (a test
//     under it sees a missing key, a remove under it fails as a missing key),
//     while a null of the object itself is no container at all.
//   - The op, path and from strings go through strconv.Quote before evanphx
//     reads them as JSON, as kube-apiserver builds them: a string holding a
//     control character other than \b \f \n \r \t, DEL, invalid UTF-8 or an
//     unprintable rune beyond U+FFFF does not decode, and fails with
//     evanphx's error for it ("Unexpected kind: unknown", "... failed to
//     decode path: ..."). An empty From is no "from" member.
//   - Options.MaxCopyBytes is AccumulatedCopySizeLimit: 0 (evanphx's
//     default, Kyverno's) sets no limit; kube-apiserver sets it to
//     KubeAPIServerMaxCopyBytes.
//
// Error texts are evanphx's, prefixed with "JSON Patch: " as kube-apiserver
// and Kyverno prefix them. Numbers are JSON numbers: int64 and float64 (and
// any other Go number) compare in test by the text encoding/json writes for
// them, so int64(1) equals float64(1) and 1.5 equals 1.5, as after the JSON
// round trip the reference implementation makes; strings compare as the JSON
// strings encoding/json writes (invalid UTF-8 is U+FFFD).
//
// Where it deliberately differs from evanphx's Patch.Apply:
//
//   - A failed test operation is no error: the whole patch is a no-op and
//     ApplyJSONPatch returns obj itself with a nil error, as kube-apiserver
//     and Kyverno do (they check errors.Is(err, jsonpatch.ErrTestFailed)).
//   - Where evanphx panics, ApplyJSONPatch returns an error wrapping
//     ErrPanic (kube-apiserver answers such a request with an internal
//     error): an add, replace, move or copy into a null set by an earlier
//     operation ("assignment to entry in nil map"), a replace or test of the
//     whole document with no value, and a test comparing arrays of equal
//     length where an element on either side is null. evanphx compares object
//     members in Go's random map order, so a test that both finds a differing
//     member and reaches such an array may fail the test there or panic;
//     ApplyJSONPatch always fails the test.
//   - The result must be an object, as kube-apiserver and Kyverno decode it
//     into one: a patch that leaves the document null or an array (through a
//     replace of "") fails with an error wrapping ErrNotObject.
//   - Values are compared as encoding/json writes them. kube-apiserver writes
//     an operation's value with protojson, which does not escape <, > and &
//     (nor U+2028, U+2029), and compares JSON texts byte for byte, so there a
//     test of a string holding those characters never succeeds; here it does
//     when the strings are equal.
//
// ApplyJSONPatch never modifies obj or the operations' values: it copies the
// objects and arrays on the paths it changes (copy-on-write), once per patch,
// and the result shares every untouched subtree with obj and the values.
//
// # Patcher
//
// A Patcher applies the patches of a chain of mutations (the mutating
// policies of one request) one after the other with ApplyJSONPatch's
// semantics, each on the object the ones before it left — a null set by one
// patch is a plain null to the next, as after kube-apiserver's JSON round
// trip between patches — copying each container once for the whole chain. A
// patch whose test fails, or that fails, is undone (a journal of the writes
// into containers copied by earlier patches), leaving the object as it was.
// A value that holds containers of the Patcher's own object (a CEL
// expression returning object.spec.x) is copied where it does, so that no
// container is reachable twice.
//
// # Diff and Marshal
//
// Diff returns add, remove and replace operations that turn one object into
// another (keys in sorted order, arrays by common prefix and suffix then
// element by element), and Marshal writes operations as a JSON Patch
// document, as a webhook's AdmissionResponse carries it.
package patch
