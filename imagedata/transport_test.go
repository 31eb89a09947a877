package imagedata

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestGuardTransport(t *testing.T) {
	body := strings.Repeat("x", 100)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("chunked") != "" {
			// No Content-Length: the limit applies while reading.
			for i := 0; i < len(body); i += 10 {
				_, _ = io.WriteString(w, body[i:i+10])
				w.(http.Flusher).Flush()
			}
			return
		}
		_, _ = io.WriteString(w, body)
	})
	plain := httptest.NewServer(handler)
	defer plain.Close()
	tlsSrv := httptest.NewTLSServer(handler)
	defer tlsSrv.Close()
	plainHost := strings.TrimPrefix(plain.URL, "http://")

	tests := []struct {
		name     string
		url      string
		insecure bool
		max      int64
		wantErr  string // of the round trip or, after it, of reading the body
	}{
		{name: "https", url: tlsSrv.URL, max: 100},
		{name: "plain HTTP to an insecure registry", url: plain.URL, insecure: true, max: 100},
		{name: "plain HTTP refused", url: plain.URL, max: 100, wantErr: "plain HTTP to " + plainHost + " refused"},
		{name: "Content-Length over the limit", url: tlsSrv.URL, max: 99, wantErr: "response of 100 bytes exceeds maxResponseBytes (99)"},
		{name: "chunked, at the limit", url: tlsSrv.URL + "?chunked=1", max: 100},
		{name: "chunked, over the limit", url: tlsSrv.URL + "?chunked=1", max: 99, wantErr: "response exceeds maxResponseBytes (99)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gt := &guardTransport{inner: tlsSrv.Client().Transport, insecure: map[string]bool{}, maxBytes: tc.max}
			if tc.insecure {
				gt.insecure[plainHost] = true
			}
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, tc.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			var got string
			resp, err := gt.RoundTrip(req)
			if err == nil {
				var b []byte
				b, err = io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				got = string(b)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.wantErr == "" && got != body:
				t.Fatalf("body %q", got)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}
