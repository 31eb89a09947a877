// Package gateway serves the Decision and Query RPCs as JSON over HTTP
// (grpc-gateway, from the google.api.http annotations of the protos), with
// the OpenAPI document generated from the same protos at /openapi.json, and
// configurable CORS.
package gateway

import (
	"context"
	_ "embed"
	"net/http"
	"slices"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// OpenAPI is the OpenAPI (Swagger 2.0) document of the JSON API, generated
// by protoc-gen-openapiv2 (make proto).
//
//go:embed arbiter.swagger.json
var OpenAPI []byte

// Options configure the gateway.
type Options struct {
	// CORSOrigins are the origins allowed to call the API from a browser
	// ("*" for any); empty disables CORS headers.
	CORSOrigins []string
}

// New returns an http.Handler serving /v1/... by calling the gRPC server on
// conn (so every interceptor — authorization, limits, metrics — applies),
// and /openapi.json.
func New(ctx context.Context, conn *grpc.ClientConn, o Options) (http.Handler, error) {
	mux := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: false, EmitUnpopulated: false},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}),
		// grpc-gateway forwards the Authorization header as the
		// "authorization" metadata itself (bearer tokens reach the
		// authorizer); other headers follow the default matcher.
	)
	if err := arbiterv1.RegisterDecisionServiceHandler(ctx, mux, conn); err != nil {
		return nil, err
	}
	if err := arbiterv1.RegisterQueryServiceHandler(ctx, mux, conn); err != nil {
		return nil, err
	}
	root := http.NewServeMux()
	root.Handle("/v1/", mux)
	root.HandleFunc("/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(OpenAPI)
	})
	return cors(root, o.CORSOrigins), nil
}

func cors(next http.Handler, origins []string) http.Handler {
	if len(origins) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin != "" && (slices.Contains(origins, "*") || slices.Contains(origins, origin)) {
			w.Header().Set("Access-Control-Allow-Origin", origin)
			w.Header().Set("Vary", "Origin")
			w.Header().Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
			w.Header().Set("Access-Control-Allow-Headers", "Content-Type, Authorization")
			w.Header().Set("Access-Control-Max-Age", "600")
			if r.Method == http.MethodOptions {
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
