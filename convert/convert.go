// Package convert is the one place engine values and their wire form (the
// arbiter.v1 messages) are converted, both ways: requests (DecideRequest ↔
// admission.Request), decisions (engine.Decision → DecideResponse) and results
// (PolicyResult → PolicyReport results). The server, the CLI's apply and
// decide, and anything else that speaks the API with the engine use it.
package convert

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/authz"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/patch"
	"github.com/arbiter-pdp/arbiter/engine/report"
	"github.com/arbiter-pdp/arbiter/internal/jsonenc"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// RequestFromProto converts a DecideRequest to an engine request and its
// evaluation options (the objects' sizes measured while decoding them).
// Errors name the offending field.
func RequestFromProto(in *arbiterv1.DecideRequest) (*admission.Request, *engine.EvalOptions, error) {
	switch in.GetPayload() {
	case arbiterv1.Payload_PAYLOAD_UNSPECIFIED:
	case arbiterv1.Payload_PAYLOAD_ENVOY_CHECK_REQUEST:
		return authzRequestFromProto(in, admission.ShapeEnvoy)
	case arbiterv1.Payload_PAYLOAD_HTTP_CHECK_REQUEST:
		return authzRequestFromProto(in, admission.ShapeHTTP)
	default:
		return nil, nil, fieldError("payload", fmt.Sprintf("unknown payload %v", in.GetPayload()))
	}
	req := &admission.Request{
		SubResource: in.GetSubResource(),
		Name:        in.GetName(),
		Namespace:   in.GetNamespace(),
		DryRun:      in.GetDryRun(),
	}
	var err error
	var sizes, oldSizes *manifest.Sizes
	if req.Object, sizes, err = objectField("object", in.GetObjectJson(), in.GetObject(), in.ObjectWire()); err != nil {
		return nil, nil, err
	}
	if req.OldObject, oldSizes, err = objectField("old_object", in.GetOldObjectJson(), in.GetOldObject(), in.OldObjectWire()); err != nil {
		return nil, nil, err
	}
	opts := &engine.EvalOptions{}
	switch in.GetStages() {
	case arbiterv1.Stages_STAGES_UNSPECIFIED:
	case arbiterv1.Stages_STAGES_VALIDATE_ONLY:
		opts.Stages = engine.ValidateOnly
	case arbiterv1.Stages_STAGES_MUTATE_ONLY:
		opts.Stages = engine.MutateOnly
	default:
		return nil, nil, fieldError("stages", fmt.Sprintf("unknown stages %v", in.GetStages()))
	}
	// Measured while decoding JSON: the engine need not walk the objects.
	switch {
	case req.Object != nil && sizes == nil, req.OldObject != nil && oldSizes == nil:
	case sizes != nil && oldSizes != nil:
		both := sizes.Max(*oldSizes)
		opts.ObjectSizes = &both
	case sizes != nil:
		opts.ObjectSizes = sizes
	default:
		opts.ObjectSizes = oldSizes
	}
	if ns := in.GetNamespaceObject(); ns != nil {
		req.NamespaceObject, _ = structValue(ns)
	}
	if o := in.GetOptions(); o != nil {
		req.Options = o.AsMap()
	}
	switch in.GetOperation() {
	case arbiterv1.Operation_OPERATION_UNSPECIFIED, arbiterv1.Operation_OPERATION_CREATE:
		req.Operation = admission.OpCreate
	case arbiterv1.Operation_OPERATION_UPDATE:
		req.Operation = admission.OpUpdate
	case arbiterv1.Operation_OPERATION_DELETE:
		req.Operation = admission.OpDelete
	case arbiterv1.Operation_OPERATION_CONNECT:
		req.Operation = admission.OpConnect
	default:
		return nil, nil, fieldError("operation", fmt.Sprintf("unknown operation %v", in.GetOperation()))
	}
	switch in.GetMode() {
	case arbiterv1.Mode_MODE_UNSPECIFIED, arbiterv1.Mode_MODE_ADMISSION:
		req.Mode = admission.ModeAdmission
	case arbiterv1.Mode_MODE_BACKGROUND:
		req.Mode = admission.ModeBackground
	default:
		return nil, nil, fieldError("mode", fmt.Sprintf("unknown mode %v", in.GetMode()))
	}
	if k := in.GetKind(); k != nil {
		req.Kind = schema.GroupVersionKind{Group: k.GetGroup(), Version: k.GetVersion(), Kind: k.GetKind()}
	}
	if r := in.GetResource(); r != nil {
		req.Resource = schema.GroupVersionResource{Group: r.GetGroup(), Version: r.GetVersion(), Resource: r.GetResource()}
	}
	if k := in.GetRequestKind(); k != nil {
		req.RequestKind = &schema.GroupVersionKind{Group: k.GetGroup(), Version: k.GetVersion(), Kind: k.GetKind()}
	}
	if r := in.GetRequestResource(); r != nil {
		req.RequestResource = &schema.GroupVersionResource{Group: r.GetGroup(), Version: r.GetVersion(), Resource: r.GetResource()}
	}
	req.RequestSubResource = in.GetRequestSubResource()
	if u := in.GetUserInfo(); u != nil {
		req.UserInfo = admission.UserInfo{Username: u.GetUsername(), UID: u.GetUid(), Groups: u.GetGroups()}
		if len(u.GetExtra()) > 0 {
			req.UserInfo.Extra = make(map[string][]string, len(u.GetExtra()))
			for k, v := range u.GetExtra() {
				req.UserInfo.Extra[k] = v.GetValues()
			}
		}
	}
	switch req.Operation {
	case admission.OpCreate, admission.OpUpdate, admission.OpConnect:
		if req.Object == nil {
			return nil, nil, fieldError("object", "required for "+req.Operation)
		}
	case admission.OpDelete:
		if req.OldObject == nil {
			return nil, nil, fieldError("old_object", "required for DELETE")
		}
	}
	req.Fill()
	if req.Kind.Kind == "" {
		return nil, nil, fieldError("kind", "unknown: set kind, or apiVersion and kind in the object")
	}
	if req.Kind.Version == "" {
		// A kind without a version matches no rule: the decision would
		// silently allow. Refuse it instead.
		field := "kind.version"
		if in.GetKind() == nil {
			field = "object.apiVersion"
			if req.Object == nil {
				field = "old_object.apiVersion"
			}
		}
		return nil, nil, fieldError(field, "required: a "+req.Kind.Kind+" without an API version matches no policy")
	}
	return req, opts, nil
}

// authzRequestFromProto converts a DecideRequest whose object is an Envoy
// or HTTP CheckRequest: only the object is read; one that is not a
// CheckRequest of its kind is refused, naming the field.
func authzRequestFromProto(in *arbiterv1.DecideRequest, shape admission.Shape) (*admission.Request, *engine.EvalOptions, error) {
	field := "object"
	if len(in.GetObjectJson()) > 0 {
		field = "object_json"
	}
	obj, _, err := objectField("object", in.GetObjectJson(), in.GetObject(), in.ObjectWire())
	if err != nil {
		return nil, nil, err
	}
	if obj == nil {
		return nil, nil, fieldError(field, "required: the "+shape.String()+" CheckRequest")
	}
	if _, _, err := authz.Prepare(shape, obj); err != nil {
		return nil, nil, fieldError(field, "not a valid "+shape.String()+" CheckRequest: "+err.Error())
	}
	return &admission.Request{Object: obj, Shape: shape, Mode: admission.ModeAdmission}, &engine.EvalOptions{}, nil
}

// objectField decodes an object given as JSON, or as a Struct: decoded
// (s), or left encoded by the server's codec (wire, see
// arbiterv1.DecideRequest.ObjectWire); it measures its sizes as it goes.
func objectField(name string, raw []byte, s *structpb.Struct, wire []byte) (map[string]any, *manifest.Sizes, error) {
	if len(raw) > 0 {
		// raw is the request's own copy, which nothing changes: the
		// object's strings may be slices of it.
		m, sizes, err := manifest.DecodeJSONSizedOwned(raw)
		if err != nil {
			return nil, nil, fieldError(name+"_json", err.Error())
		}
		return m, &sizes, nil
	}
	if wire != nil {
		m, sizes, err := structWireValue(wire)
		if err != nil {
			return nil, nil, fieldError(name, err.Error())
		}
		return m, &sizes, nil
	}
	if s == nil {
		return nil, nil, nil
	}
	m, sizes := structValue(s)
	return m, &sizes, nil
}

// structValue converts a protobuf Struct to the engine's JSON-shaped data
// in one walk, measuring its sizes as it goes (as manifest.SizesOf would
// after): the value is that of s.AsMap() with normalizeNumbers applied
// (integral numbers as int64), which FuzzStructValue checks.
func structValue(s *structpb.Struct) (map[string]any, manifest.Sizes) {
	fields := s.GetFields()
	n := uint64(len(fields))
	sizes := manifest.Sizes{Entries: n, Length: n}
	m := make(map[string]any, len(fields))
	for k, v := range fields {
		var vs manifest.Sizes
		m[k], vs = valueOf(v)
		sizes = sizes.Max(vs)
		sizes.Length = max(sizes.Length, uint64(len(k)))
	}
	return m, sizes
}

// valueOf is structValue for one Value: v.AsInterface() (NaN and the
// infinities as the strings it makes of them), numbers normalized.
func valueOf(v *structpb.Value) (any, manifest.Sizes) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return k.StringValue, manifest.Sizes{Length: uint64(len(k.StringValue))}
	case *structpb.Value_NumberValue:
		return numberValue(k.NumberValue)
	case *structpb.Value_BoolValue:
		return k.BoolValue, manifest.Sizes{}
	case *structpb.Value_StructValue:
		return structValue(k.StructValue)
	case *structpb.Value_ListValue:
		vals := k.ListValue.GetValues()
		n := uint64(len(vals))
		sizes := manifest.Sizes{Entries: n, Length: n}
		l := make([]any, len(vals))
		for i, e := range vals {
			var es manifest.Sizes
			l[i], es = valueOf(e)
			sizes = sizes.Max(es)
		}
		return l, sizes
	}
	// NullValue, and a Value with no kind set (AsInterface: nil).
	return nil, manifest.Sizes{}
}

// normalizeNumber turns an integral float64 of a protobuf Struct into an
// int64, as Kubernetes' JSON decoding does.
func normalizeNumber(f float64) any {
	if f == float64(int64(f)) && f < 1<<53 && f > -(1<<53) {
		return int64(f)
	}
	return f
}

// FieldError is a request field that is not acceptable (the server answers
// it with INVALID_ARGUMENT and a field violation).
type FieldError struct {
	Field  string
	Detail string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Detail }

func fieldError(field, detail string) error { return &FieldError{Field: field, Detail: detail} }

// ResponseFromDecision converts an engine decision to a DecideResponse.
func ResponseFromDecision(d *engine.Decision) *arbiterv1.DecideResponse {
	return WithResults(VerdictFromDecision(d), d)
}

// WithResults sets resp's results to d's, and returns resp.
func WithResults(resp *arbiterv1.DecideResponse, d *engine.Decision) *arbiterv1.DecideResponse {
	resp.Results = make([]*arbiterv1.PolicyResult, len(d.Results))
	for i := range d.Results {
		r := &d.Results[i]
		resp.Results[i] = &arbiterv1.PolicyResult{
			Policy:     r.Policy,
			PolicyKind: r.PolicyKind,
			Rule:       r.Rule,
			Result:     r.Result,
			Message:    r.Message,
			Properties: r.Properties,
			Actions:    r.Actions,
			Exceptions: r.Exceptions(),
			Source:     r.Source,
			Scored:     r.Scored,
			Category:   r.Category,
			Severity:   r.Severity,
			Mutated:    r.Mutated,
		}
	}
	return resp
}

// PatchTypeJSONPatch is DecideResponse.patch_type of an RFC 6902 patch.
const PatchTypeJSONPatch = "JSONPatch"

// VerdictFromDecision is the DecideResponse of a decision without its
// results (with its patch).
func VerdictFromDecision(d *engine.Decision) *arbiterv1.DecideResponse {
	resp := VerdictWithoutPatch(d)
	if ops := d.Patch(); len(ops) > 0 {
		// Diff's values are JSON-shaped: they always marshal.
		resp.Patch, _ = patch.Marshal(ops)
		resp.PatchType = PatchTypeJSONPatch
	}
	return resp
}

// VerdictWithoutPatch is VerdictFromDecision without the patch, for an
// answer that carries the admitted object instead.
func VerdictWithoutPatch(d *engine.Decision) *arbiterv1.DecideResponse {
	resp := &arbiterv1.DecideResponse{
		Allowed:          d.Allowed,
		Warnings:         d.Warnings,
		AuditAnnotations: d.AuditAnnotations,
	}
	if a := d.Authorization; a != nil {
		resp.AuthorizationResponseJson = a.JSON
		resp.AuthorizationPolicy = a.Policy
	}
	if !d.Allowed {
		code := d.Code
		if code == 0 {
			code = 400
		}
		resp.Status = &arbiterv1.Status{Code: code, Reason: d.Reason, Message: d.Message}
	}
	return resp
}

// RequestToProto is the DecideRequest of an engine request, its object and
// old object encoded as JSON.
func RequestToProto(req *admission.Request) (*arbiterv1.DecideRequest, error) {
	var object, oldObject []byte
	var err error
	if req.Object != nil {
		if object, err = jsonenc.AppendValue(nil, req.Object); err != nil {
			return nil, fmt.Errorf("object: %v", err)
		}
	}
	if req.OldObject != nil {
		if oldObject, err = jsonenc.AppendValue(nil, req.OldObject); err != nil {
			return nil, fmt.Errorf("old object: %v", err)
		}
	}
	return RequestToProtoJSON(req, object, oldObject), nil
}

// RequestToProtoJSON is the DecideRequest of req, whose object and old
// object are given as JSON. Its user is the request's name and groups.
func RequestToProtoJSON(req *admission.Request, object, oldObject []byte) *arbiterv1.DecideRequest {
	pr := &arbiterv1.DecideRequest{
		Kind:          &arbiterv1.GroupVersionKind{Group: req.Kind.Group, Version: req.Kind.Version, Kind: req.Kind.Kind},
		Resource:      &arbiterv1.GroupVersionResource{Group: req.Resource.Group, Version: req.Resource.Version, Resource: req.Resource.Resource},
		SubResource:   req.SubResource,
		Name:          req.Name,
		Namespace:     req.Namespace,
		DryRun:        req.DryRun,
		UserInfo:      &arbiterv1.UserInfo{Username: req.UserInfo.Username, Groups: req.UserInfo.Groups},
		ObjectJson:    object,
		OldObjectJson: oldObject,
	}
	switch strings.ToUpper(req.Operation) {
	case admission.OpUpdate:
		pr.Operation = arbiterv1.Operation_OPERATION_UPDATE
	case admission.OpDelete:
		pr.Operation = arbiterv1.Operation_OPERATION_DELETE
	case admission.OpConnect:
		pr.Operation = arbiterv1.Operation_OPERATION_CONNECT
	default:
		pr.Operation = arbiterv1.Operation_OPERATION_CREATE
	}
	if req.Mode == admission.ModeBackground {
		pr.Mode = arbiterv1.Mode_MODE_BACKGROUND
	} else {
		pr.Mode = arbiterv1.Mode_MODE_ADMISSION
	}
	return pr
}

// NamespaceToProto is a Namespace object as a DecideRequest's
// namespace_object (RequestFromProto reads it back, integral numbers as
// int64).
func NamespaceToProto(ns *manifest.Object) (*structpb.Struct, error) {
	return structpb.NewStruct(ns.Content)
}

// ReportResults converts decision results to PolicyReport results.
func ReportResults(rs []*arbiterv1.PolicyResult) []report.Result {
	out := make([]report.Result, len(rs))
	for i, r := range rs {
		out[i] = report.Result{
			Policy:     r.GetPolicy(),
			Rule:       r.GetRule(),
			Result:     r.GetResult(),
			Message:    r.GetMessage(),
			Properties: r.GetProperties(),
			Source:     r.GetSource(),
			Scored:     r.GetScored(),
			Category:   r.GetCategory(),
			Severity:   r.GetSeverity(),
		}
	}
	return out
}
