package imagedata

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// newBaseTransport is the transport of a Fetcher without Options.Transport:
// go-containerregistry's defaults as Kyverno sets them (proxy from the
// environment, a 5 s dial timeout so that the ping's HTTPS-then-HTTP
// attempts do not wait 30 s each).
func newBaseTransport() *http.Transport {
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   50,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: 1 * time.Second,
	}
}

// guardTransport refuses plain HTTP to hosts that are not insecure
// registries, and bounds the size of every response body.
type guardTransport struct {
	inner    http.RoundTripper
	insecure map[string]bool // host[:port] as in image references
	maxBytes int64
}

func (t *guardTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" && !t.insecure[req.URL.Host] {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, fmt.Errorf("plain HTTP to %s refused: the registry is not in insecureRegistries", req.URL.Host)
	}
	resp, err := t.inner.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > t.maxBytes {
		_ = resp.Body.Close()
		// The client wraps it in a *url.Error naming the method and URL.
		return nil, fmt.Errorf("response of %d bytes exceeds maxResponseBytes (%d)", resp.ContentLength, t.maxBytes)
	}
	resp.Body = &limitedBody{rc: resp.Body, left: t.maxBytes, what: req.Method + " " + req.URL.Redacted(), max: t.maxBytes}
	return resp, nil
}

// limitedBody fails a read past max bytes (where io.LimitReader would end
// the body early and leave a truncated manifest to a JSON error).
type limitedBody struct {
	rc   io.ReadCloser
	left int64
	max  int64
	what string
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One more byte tells a body of exactly max bytes from a longer one.
		var one [1]byte
		n, err := b.rc.Read(one[:])
		if n > 0 {
			return 0, fmt.Errorf("%s: response exceeds maxResponseBytes (%d)", b.what, b.max)
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }
