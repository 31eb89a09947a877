package main

// The image (make image, internal/image) holds no CA bundle: where the
// system has none, crypto/x509 uses the Mozilla roots compiled in by
// golang.org/x/crypto/x509roots/fallback (image registries, callouts).
// Where the system has roots (a host, a mounted bundle, SSL_CERT_FILE),
// those are used and the fallback is not.
import _ "golang.org/x/crypto/x509roots/fallback"
