package webhook

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// Audit annotation keys the shim sets. The API server records a webhook's
// audit annotation KEY as "<webhook name>/KEY" (validate.arbiter.dev/revision
// with the manifests in deploy/), and drops a key that makes this not a
// qualified name, so keys carry no "/" of their own.
const (
	// AnnotationRevision is the store revision the decision was made at.
	AnnotationRevision = "revision"
	// AnnotationDigest is the content digest of that revision.
	AnnotationDigest = "digest"
	// AnnotationDecisionID is the decision's unique id (decision log, traces).
	AnnotationDecisionID = "decision-id"
	// AnnotationDryRun is "true" on a dry-run request.
	AnnotationDryRun = "dry-run"
	// AnnotationExceptions maps each policy whose result an exception
	// decided to those exceptions (namespace/name), as JSON.
	AnnotationExceptions = "exceptions"
	// AnnotationValidationFailure lists the failures of policies with the
	// Audit action, as JSON shaped like the API server's own
	// validation.policy.admission.k8s.io/validation_failure.
	AnnotationValidationFailure = "validation_failure"
)

var operations = map[admissionv1.Operation]arbiterv1.Operation{
	admissionv1.Create:  arbiterv1.Operation_OPERATION_CREATE,
	admissionv1.Update:  arbiterv1.Operation_OPERATION_UPDATE,
	admissionv1.Delete:  arbiterv1.Operation_OPERATION_DELETE,
	admissionv1.Connect: arbiterv1.Operation_OPERATION_CONNECT,
}

// DecideRequest converts an AdmissionRequest to a DecideRequest. The object
// and old object are passed on as the raw JSON bytes the API server sent,
// never re-encoded.
func DecideRequest(in *admissionv1.AdmissionRequest) (*arbiterv1.DecideRequest, error) {
	op, ok := operations[in.Operation]
	if !ok {
		return nil, fmt.Errorf("request.operation: unknown operation %q", in.Operation)
	}
	out := &arbiterv1.DecideRequest{
		ObjectJson:         in.Object.Raw,
		OldObjectJson:      in.OldObject.Raw,
		Operation:          op,
		Kind:               protoGVK(&in.Kind),
		Resource:           protoGVR(&in.Resource),
		SubResource:        in.SubResource,
		RequestKind:        protoGVK(in.RequestKind),
		RequestResource:    protoGVR(in.RequestResource),
		RequestSubResource: in.RequestSubResource,
		Name:               in.Name,
		Namespace:          in.Namespace,
		DryRun:             in.DryRun != nil && *in.DryRun,
		Mode:               arbiterv1.Mode_MODE_ADMISSION,
		Uid:                string(in.UID),
		UserInfo: &arbiterv1.UserInfo{
			Username: in.UserInfo.Username,
			Uid:      in.UserInfo.UID,
			Groups:   in.UserInfo.Groups,
		},
	}
	if len(in.UserInfo.Extra) > 0 {
		out.UserInfo.Extra = make(map[string]*arbiterv1.StringList, len(in.UserInfo.Extra))
		for k, v := range in.UserInfo.Extra {
			out.UserInfo.Extra[k] = &arbiterv1.StringList{Values: v}
		}
	}
	if raw := in.Options.Raw; len(raw) > 0 {
		opts := &structpb.Struct{}
		if err := protojson.Unmarshal(raw, opts); err != nil {
			return nil, fmt.Errorf("request.options: %v", err)
		}
		out.Options = opts
	}
	if op == arbiterv1.Operation_OPERATION_DELETE {
		if len(out.OldObjectJson) == 0 {
			return nil, fmt.Errorf("request.oldObject: required for DELETE")
		}
	} else if len(out.ObjectJson) == 0 {
		return nil, fmt.Errorf("request.object: required for %s", in.Operation)
	}
	return out, nil
}

func protoGVK(k *metav1.GroupVersionKind) *arbiterv1.GroupVersionKind {
	if k == nil || k.Kind == "" {
		return nil
	}
	return &arbiterv1.GroupVersionKind{Group: k.Group, Version: k.Version, Kind: k.Kind}
}

func protoGVR(r *metav1.GroupVersionResource) *arbiterv1.GroupVersionResource {
	if r == nil || r.Resource == "" {
		return nil
	}
	return &arbiterv1.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource}
}

// AdmissionResponse converts a decision to the response to the request uid:
// allowed, the patch of the mutations (patchType JSONPatch; never on a
// denial), status (the decision service's code, reason and message; the
// message is Kyverno's "Policy NAME failed: MESSAGE", joined with "; "),
// warnings, and audit annotations: the decision service's, then the
// revision, digest and decision id (and dry-run, exceptions and Audit
// failures when there are any). log, if not nil, hears of audit annotation
// keys that had to be rewritten.
func AdmissionResponse(uid types.UID, d *arbiterv1.DecideResponse, dryRun bool, log *slog.Logger) *admissionv1.AdmissionResponse {
	out := &admissionv1.AdmissionResponse{
		UID:      uid,
		Allowed:  d.GetAllowed(),
		Warnings: d.GetWarnings(),
	}
	if d.GetAllowed() && len(d.GetPatch()) > 0 {
		// Only a JSON patch is defined for admission responses.
		pt := admissionv1.PatchTypeJSONPatch
		out.Patch, out.PatchType = d.GetPatch(), &pt
	}
	if !d.GetAllowed() {
		st := d.GetStatus()
		code := st.GetCode()
		if code < http.StatusBadRequest {
			// A denial is never a 2xx or 3xx (the API server would raise it to 400).
			code = http.StatusBadRequest
		}
		reason := metav1.StatusReason(st.GetReason())
		if reason == "" {
			reason = reasonFor(code)
		}
		msg := st.GetMessage()
		if msg == "" {
			msg = "denied by Arbiter (decision " + d.GetDecisionId() + ")"
		}
		out.Result = &metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg}
	}
	ann := make(map[string]string, len(d.GetAuditAnnotations())+5)
	for k, v := range d.GetAuditAnnotations() {
		key := annotationKey(k)
		if key == "" {
			if log != nil {
				log.Warn("dropping an audit annotation whose key cannot be made valid", "key", k)
			}
			continue
		}
		if key != k && log != nil {
			log.Debug("audit annotation key rewritten", "key", k, "as", key)
		}
		ann[key] = v
	}
	ann[AnnotationRevision] = strconv.FormatUint(d.GetRevision(), 10)
	if d.GetDigest() != "" {
		ann[AnnotationDigest] = d.GetDigest()
	}
	if d.GetDecisionId() != "" {
		ann[AnnotationDecisionID] = d.GetDecisionId()
	}
	if dryRun {
		ann[AnnotationDryRun] = "true"
	}
	exceptions := map[string][]string{}
	var failures []validationFailure
	for _, r := range d.GetResults() {
		if len(r.GetExceptions()) > 0 {
			exceptions[r.GetPolicy()] = append(exceptions[r.GetPolicy()], r.GetExceptions()...)
		}
		if (r.GetResult() == "fail" || r.GetResult() == "error") && slices.Contains(r.GetActions(), "Audit") {
			f := validationFailure{Message: r.GetMessage(), Policy: r.GetPolicy(), ValidationActions: r.GetActions()}
			if i, err := strconv.Atoi(r.GetProperties()["cel.validationIndex"]); err == nil {
				f.ExpressionIndex = &i
			}
			failures = append(failures, f)
		}
	}
	if len(exceptions) > 0 {
		b, _ := json.Marshal(exceptions)
		ann[AnnotationExceptions] = string(b)
	}
	if len(failures) > 0 {
		b, _ := json.Marshal(failures)
		ann[AnnotationValidationFailure] = string(b)
	}
	out.AuditAnnotations = ann
	return out
}

// validationFailure is one failure of a policy with the Audit action.
type validationFailure struct {
	Message           string   `json:"message"`
	Policy            string   `json:"policy"`
	ExpressionIndex   *int     `json:"expressionIndex,omitempty"`
	ValidationActions []string `json:"validationActions"`
}

// reasonFor is the metav1.StatusReason of an HTTP status code.
func reasonFor(code int32) metav1.StatusReason {
	switch code {
	case http.StatusBadRequest:
		return metav1.StatusReasonBadRequest
	case http.StatusUnauthorized:
		return metav1.StatusReasonUnauthorized
	case http.StatusForbidden:
		return metav1.StatusReasonForbidden
	case http.StatusRequestEntityTooLarge:
		return metav1.StatusReasonRequestEntityTooLarge
	case http.StatusUnprocessableEntity:
		return metav1.StatusReasonInvalid
	}
	return metav1.StatusReasonBadRequest
}

// annotationKey makes k usable as the name part of a qualified name (the
// API server prefixes it with the webhook name): "/" becomes ".", other
// characters outside [-A-Za-z0-9_.] become "_", it starts and ends with an
// alphanumeric character and has at most 63. "" when nothing is left.
func annotationKey(k string) string {
	if validName(k) {
		return k
	}
	b := []byte(k)
	for i, c := range b {
		switch {
		case c == '/':
			b[i] = '.'
		case !nameChar(c):
			b[i] = '_'
		}
	}
	trim := func(b []byte) []byte {
		for len(b) > 0 && !alnum(b[0]) {
			b = b[1:]
		}
		for len(b) > 0 && !alnum(b[len(b)-1]) {
			b = b[:len(b)-1]
		}
		return b
	}
	b = trim(b)
	if len(b) > 63 {
		b = trim(b[:63])
	}
	return string(b)
}

func validName(k string) bool {
	if k == "" || len(k) > 63 || !alnum(k[0]) || !alnum(k[len(k)-1]) {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !nameChar(k[i]) {
			return false
		}
	}
	return true
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func nameChar(c byte) bool { return alnum(c) || c == '-' || c == '_' || c == '.' }
