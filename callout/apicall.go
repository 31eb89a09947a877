package callout

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
)

// APICall makes the request of a Kyverno GlobalContextEntry's
// apiCall.service for the primary that fetches it (package kubesource):
// method (GET or POST) on url, trusting caBundle (PEM; "" for the system's
// roots), with headers and body. It is checked and bounded as the http.*
// calls are — allowedURLPrefixes (every redirect too), blockedCIDRs,
// timeout, maxResponseBytes — and recorded as function "apiCall". It
// returns the status and the body whatever the status; a refused or
// failed call is an *Error.
func (c *Client) APICall(ctx context.Context, method, url, caBundle string, headers http.Header, body []byte) (int, []byte, error) {
	v := *c
	v.ns = ""
	if caBundle != "" {
		sum := sha256.Sum256([]byte(caBundle))
		id := "sha256:" + hex.EncodeToString(sum[:8])
		hc, err := c.s.clientForCA(id, caBundle)
		if err != nil {
			call := c.newCall("apiCall", method, url)
			call.Err = &Error{Function: "apiCall", Target: quoteURL(url), Err: err}
			c.s.record(ctx, call)
			return 0, nil, call.Err
		}
		v.hc, v.ca = hc, id
	}
	return v.send(ctx, "apiCall", method, url, body, func(h http.Header) {
		for k, vs := range headers {
			for _, x := range vs {
				h.Add(k, x)
			}
		}
	})
}
