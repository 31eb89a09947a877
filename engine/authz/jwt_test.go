package authz

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	jwxjwt "github.com/lestrrat-go/jwx/v3/jwt"
)

var now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// HS256 tokens signed with "secret" (Kyverno's envoy-jwt fixtures).
const (
	adminHS256 = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjIyNDEwODE1MzksIm5iZiI6MTUxNDg1MTEzOSwicm9sZSI6ImFkbWluIiwic3ViIjoiWVd4cFkyVT0ifQ.veMeVDYlulTdieeX-jxFZ_tCmqQ_K8rwx2OktUHv5Z0"
	guestHS256 = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjIyNDEwODE1MzksIm5iZiI6MTUxNDg1MTEzOSwicm9sZSI6Imd1ZXN0Iiwic3ViIjoiWVd4cFkyVT0ifQ.ja1bgvIt47393ba_WbSBm35NrUhdxM4mOVQN8iXz8lk"
)

// sign returns a compact JWT with claims, signed with key by alg.
func sign(t *testing.T, alg jwa.SignatureAlgorithm, key any, claims map[string]any) string {
	t.Helper()
	b := jwxjwt.NewBuilder()
	for k, v := range claims {
		b = b.Claim(k, v)
	}
	tok, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	out, err := jwxjwt.Sign(tok, jwxjwt.WithKey(alg, key))
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func pemPublic(t *testing.T, pub crypto.PublicKey) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func jwkPublic(t *testing.T, pub crypto.PublicKey) string {
	t.Helper()
	k, err := jwk.Import(pub)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func kidPublic(t *testing.T, pub crypto.PublicKey, kid string) string {
	t.Helper()
	k, err := jwk.Import(pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Set(jwk.KeyIDKey, kid); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// tamper replaces the token's claims with others, keeping its signature.
func tamper(token string, claims map[string]any) string {
	parts := strings.Split(token, ".")
	b, _ := json.Marshal(claims)
	parts[1] = base64.RawURLEncoding.EncodeToString(b)
	return strings.Join(parts, ".")
}

func TestDecode(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	otherRSA, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	exp := now.Add(time.Hour).Unix()
	claims := map[string]any{"sub": "alice", "role": "admin", "aud": "arbiter", "exp": exp, "n": 3}
	rs256 := sign(t, jwa.RS256(), rsaKey, claims)
	es256 := sign(t, jwa.ES256(), ecKey, claims)
	expired := sign(t, jwa.RS256(), rsaKey, map[string]any{"sub": "alice", "exp": now.Add(-time.Hour).Unix()})
	notYet := sign(t, jwa.ES256(), ecKey, map[string]any{"sub": "alice", "nbf": now.Add(time.Hour).Unix()})
	kidKey, err := jwk.Import(rsaKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := kidKey.Set(jwk.KeyIDKey, "k2"); err != nil {
		t.Fatal(err)
	}
	withKid := sign(t, jwa.RS256(), kidKey, claims)

	for _, tc := range []struct {
		name, token, key string
		// wantErr is text of the error; "" when the token verifies.
		wantErr   string
		wantValid bool
		wantRole  string
	}{
		{name: "HS256 admin", token: adminHS256, key: "secret", wantValid: true, wantRole: "admin"},
		{name: "HS256 guest", token: guestHS256, key: "secret", wantValid: true, wantRole: "guest"},
		{name: "HS256 wrong secret", token: adminHS256, key: "other", wantErr: "could not verify"},
		{name: "HS256 tampered", token: tamper(guestHS256, map[string]any{"role": "admin", "exp": 2241081539}), key: "secret", wantErr: "could not verify"},
		{name: "RS256 PEM public key", token: rs256, key: pemPublic(t, &rsaKey.PublicKey), wantValid: true, wantRole: "admin"},
		{name: "RS256 JWK", token: rs256, key: jwkPublic(t, &rsaKey.PublicKey), wantValid: true, wantRole: "admin"},
		{name: "RS256 JWK set of one key", token: rs256, key: `{"keys":[` + jwkPublic(t, &rsaKey.PublicKey) + `]}`, wantValid: true, wantRole: "admin"},
		{name: "RS256 JWK set, key by kid", token: withKid, key: `{"keys":[` + kidPublic(t, &otherRSA.PublicKey, "k1") + `,` + kidPublic(t, &rsaKey.PublicKey, "k2") + `]}`, wantValid: true, wantRole: "admin"},
		{name: "RS256 JWK set, no kid", token: rs256, key: `{"keys":[` + kidPublic(t, &otherRSA.PublicKey, "k1") + `,` + kidPublic(t, &rsaKey.PublicKey, "k2") + `]}`, wantErr: "no key ID"},
		{name: "RS256 another key", token: rs256, key: pemPublic(t, &otherRSA.PublicKey), wantErr: "could not verify"},
		{name: "RS256 tampered", token: tamper(rs256, map[string]any{"role": "admin", "sub": "mallory"}), key: pemPublic(t, &rsaKey.PublicKey), wantErr: "could not verify"},
		{name: "RS256 with the secret of HS256", token: rs256, key: "secret", wantErr: "could not verify"},
		{name: "ES256 PEM public key", token: es256, key: pemPublic(t, &ecKey.PublicKey), wantValid: true, wantRole: "admin"},
		{name: "ES256 tampered", token: tamper(es256, map[string]any{"role": "admin", "sub": "mallory"}), key: pemPublic(t, &ecKey.PublicKey), wantErr: "could not verify"},
		// an HMAC token signed with the PEM text of a public key as the
		// secret (algorithm confusion) does not verify against that key
		{name: "HS256 signed with a public key's PEM", token: sign(t, jwa.HS256(), []byte(pemPublic(t, &rsaKey.PublicKey)), claims), key: pemPublic(t, &rsaKey.PublicKey), wantErr: "could not verify"},
		{name: "expired", token: expired, key: pemPublic(t, &rsaKey.PublicKey), wantValid: false},
		{name: "not yet valid", token: notYet, key: pemPublic(t, &ecKey.PublicKey), wantValid: false},
		{name: "alg none", token: "eyJhbGciOiJub25lIn0.eyJyb2xlIjoiYWRtaW4ifQ.", key: "secret", wantErr: "failed"},
		{name: "not a JWT", token: "a.b.c", key: "secret", wantErr: "failed"},
		{name: "empty", token: "", key: "secret", wantErr: "failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := Decode(tc.token, tc.key, now)
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("decoded: %+v", tok)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %q, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tok.Valid != tc.wantValid {
				t.Errorf("valid: %v, want %v", tok.Valid, tc.wantValid)
			}
			if tc.wantRole != "" && tok.Claims["role"] != tc.wantRole {
				t.Errorf("claims: %v", tok.Claims)
			}
		})
	}

	// Claims are shaped as kyverno-authz's protobuf Struct: numbers are
	// doubles, numeric dates whole seconds, "aud" a list.
	tok, err := Decode(rs256, pemPublic(t, &rsaKey.PublicKey), now)
	if err != nil {
		t.Fatal(err)
	}
	if tok.Claims["exp"] != float64(exp) || tok.Claims["n"] != float64(3) {
		t.Errorf("numbers: %#v", tok.Claims)
	}
	if aud, ok := tok.Claims["aud"].([]any); !ok || len(aud) != 1 || aud[0] != "arbiter" {
		t.Errorf("aud: %#v", tok.Claims["aud"])
	}
	// The HS256 fixture, as kyverno-authz's own test decodes it.
	tok, err = Decode(guestHS256, "secret", now)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"exp": float64(2241081539), "nbf": float64(1514851139), "role": "guest", "sub": "YWxpY2U="}
	if b1, b2 := mustJSON(tok.Claims), mustJSON(want); string(b1) != string(b2) {
		t.Errorf("claims %s, want %s", b1, b2)
	}
	// Validity is at the time given.
	if tok, err := Decode(adminHS256, "secret", now.AddDate(100, 0, 0)); err != nil || tok.Valid {
		t.Errorf("an expired token is valid: %+v %v", tok, err)
	}
}
