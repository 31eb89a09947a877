package server

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	"github.com/arbiter-pdp/arbiter/convert"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server/limits"
	"github.com/arbiter-pdp/arbiter/store"
)

// FieldError is a request field that is not acceptable: the server's own
// (a write, a query, a batch) and those convert finds in a DecideRequest.
type FieldError = convert.FieldError

// toStatus is the one place where domain errors become gRPC statuses.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var (
		le  *limits.Error
		fe  *FieldError
		np  *NotPrimaryError
		rnr *RevisionNotReachedError
		re  *store.RevisionError
	)
	switch {
	case errors.As(err, &le):
		return withDetails(codes.ResourceExhausted, le.Error(), &errdetails.QuotaFailure{
			Violations: []*errdetails.QuotaFailure_Violation{{Subject: le.Flag, Description: le.Error()}},
		})
	case errors.As(err, &fe):
		return withDetails(codes.InvalidArgument, err.Error(), &errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: fe.Field, Description: fe.Detail}},
		})
	case manifest.AsLoadErrors(err) != nil:
		l := manifest.AsLoadErrors(err)
		br := &errdetails.BadRequest{}
		for _, e := range l {
			field := e.Object
			if e.Field != "" {
				field += ": " + e.Field
			}
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: field, Description: e.Detail})
		}
		return withDetails(codes.InvalidArgument, "refused: "+l.Error(), br)
	case errors.As(err, new(*NotFoundError)):
		return status.Error(codes.NotFound, err.Error())
	case errors.As(err, &np):
		return withDetails(codes.FailedPrecondition, err.Error(), &arbiterv1.RevisionInfo{Primary: np.Primary})
	case errors.As(err, &rnr):
		return withDetails(codes.FailedPrecondition, err.Error(), &arbiterv1.RevisionInfo{Revision: rnr.Have, Digest: rnr.Digest, Primary: rnr.Primary})
	case errors.Is(err, store.ErrConflict) && errors.As(err, &re):
		return withDetails(codes.Aborted, err.Error(), &arbiterv1.RevisionInfo{Revision: re.Current})
	case errors.Is(err, store.ErrInvalid), errors.Is(err, store.ErrRejected):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, store.ErrClosed):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func withDetails(c codes.Code, msg string, details ...protoadapt.MessageV1) error {
	st := status.New(c, msg)
	if withD, err := st.WithDetails(details...); err == nil {
		st = withD
	}
	return st.Err()
}
