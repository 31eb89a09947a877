package imageverify

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

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

type insecureKey struct{}

// withInsecure marks a context whose requests may use plain HTTP to
// registry (a policy's allowInsecureRegistry).
func withInsecure(ctx context.Context, registry string) context.Context {
	return context.WithValue(ctx, insecureKey{}, registry)
}

// guardTransport refuses plain HTTP to registries that are not insecure,
// bounds the size of every response body and the requests in flight, and
// measures them.
type guardTransport struct {
	inner    http.RoundTripper
	insecure map[string]bool
	maxBytes int64
	sem      chan struct{}
	stats    *counters
}

func (t *guardTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" && !t.insecure[req.URL.Host] && req.Context().Value(insecureKey{}) != req.URL.Host {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, fmt.Errorf("plain HTTP to %s refused: the registry is not in insecureRegistries", req.URL.Host)
	}
	select {
	case t.sem <- struct{}{}:
	case <-req.Context().Done():
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, req.Context().Err()
	}
	n := t.stats.inFlight.Add(1)
	for {
		m := t.stats.maxInFlight.Load()
		if n <= m || t.stats.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	start := time.Now()
	release := sync.OnceFunc(func() {
		t.stats.inFlight.Add(-1)
		t.stats.requests.Add(1)
		t.stats.latency.Add(int64(time.Since(start)))
		<-t.sem
	})
	resp, err := t.inner.RoundTrip(req)
	if err != nil {
		t.stats.requestErrors.Add(1)
		release()
		return nil, err
	}
	if resp.StatusCode >= 500 {
		t.stats.requestErrors.Add(1)
	}
	if resp.ContentLength > t.maxBytes {
		_ = resp.Body.Close()
		release()
		return nil, fmt.Errorf("response of %d bytes exceeds maxResponseBytes (%d)", resp.ContentLength, t.maxBytes)
	}
	resp.Body = &limitedBody{rc: resp.Body, left: t.maxBytes, what: req.Method + " " + req.URL.Redacted(), max: t.maxBytes, release: release}
	return resp, nil
}

// limitedBody fails a read past max bytes, and releases the request's
// slot when closed or read to its end.
type limitedBody struct {
	rc      io.ReadCloser
	left    int64
	max     int64
	what    string
	release func()
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		n, err := b.rc.Read(one[:])
		if n > 0 {
			return 0, fmt.Errorf("%s: response exceeds maxResponseBytes (%d)", b.what, b.max)
		}
		if err != nil {
			b.release()
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if err != nil {
		b.release()
	}
	return n, err
}

func (b *limitedBody) Close() error {
	b.release()
	return b.rc.Close()
}

// counters are a Verifier's statistics.
type counters struct {
	requests, requestErrors, latency atomic.Int64
	inFlight, maxInFlight            atomic.Int64
	cacheHits, cacheMisses           atomic.Int64
	verifications, failures, errors  atomic.Int64
}
