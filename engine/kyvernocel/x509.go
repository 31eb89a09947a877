package kyvernocel

import (
	"bytes"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// x509 library (sdk extensions/cel/libs/x509):
//
//	x509.decode(pem string) → dyn
//
// A CERTIFICATE decodes to Kyverno's CertificateOutput JSON shape (raw fields
// base64, times RFC 3339, PublicKey {N, E}); a CERTIFICATE REQUEST to the JSON
// of Go's x509.CertificateRequest with that PublicKey. Only RSA keys are
// accepted, as in Kyverno.

func x509Functions() []cel.EnvOption {
	return []cel.EnvOption{
		cel.Function("x509.decode",
			cel.Overload("x509_decode_string", []*cel.Type{types.StringType}, types.DynType,
				cel.UnaryBinding(x509Decode))),
	}
}

type x509PublicKey struct {
	N string
	E int
}

type certificateOutput struct {
	Raw                         string
	RawTBSCertificate           string
	RawSubjectPublicKeyInfo     string
	RawSubject                  string
	RawIssuer                   string
	Signature                   string
	PublicKeyAlgorithm          x509.PublicKeyAlgorithm
	PublicKey                   x509PublicKey
	SerialNumber                int64
	Issuer                      pkix.Name
	NotBefore                   string
	NotAfter                    string
	KeyUsage                    x509.KeyUsage
	Extensions                  []pkix.Extension
	ExtraExtensions             []pkix.Extension
	ExtKeyUsage                 []x509.ExtKeyUsage
	BasicConstraintsValid       bool
	IsCA                        bool
	MaxPathLen                  int
	MaxPathLenZero              bool
	AuthorityKeyId              []byte
	OCSPServer                  []string
	IssuingCertificateURL       []string
	DNSNames                    []string
	EmailAddresses              []string
	IPAddresses                 []net.IP
	PermittedDNSDomainsCritical bool
	PermittedDNSDomains         []string
	ExcludedDNSDomains          []string
	PermittedIPRanges           []*net.IPNet
	ExcludedIPRanges            []*net.IPNet
	PermittedEmailAddresses     []string
	ExcludedEmailAddresses      []string
	PermittedURIDomains         []string
	ExcludedURIDomains          []string
	CRLDistributionPoints       []string
	PolicyIdentifiers           []asn1.ObjectIdentifier
}

func x509Decode(val ref.Val) ref.Val {
	input, errVal := toString(val)
	if errVal != nil {
		return errVal
	}
	out, err := DecodeX509(input)
	if err != nil {
		return types.WrapErr(err)
	}
	return types.DefaultTypeAdapter.NativeToValue(out)
}

// DecodeX509 decodes the first PEM block of input as x509.decode does.
func DecodeX509(input string) (map[string]any, error) {
	block, _ := pem.Decode([]byte(input))
	if block == nil {
		return nil, errors.New("failed to decode PEM block")
	}
	switch block.Type {
	case "CERTIFICATE":
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		if cert.PublicKeyAlgorithm != x509.RSA {
			return nil, errors.New("certificate should use rsa algorithm")
		}
		pk, err := parseRSASubjectPublicKeyInfo(cert.RawSubjectPublicKeyInfo)
		if err != nil {
			return nil, errors.New("failed to parse subject public key info")
		}
		return encodeJSONMap(certificateOutput{
			Raw:                         b64(cert.Raw),
			RawTBSCertificate:           b64(cert.RawTBSCertificate),
			RawSubjectPublicKeyInfo:     b64(cert.RawSubjectPublicKeyInfo),
			RawSubject:                  b64(cert.RawSubject),
			RawIssuer:                   b64(cert.RawIssuer),
			Signature:                   b64(cert.Signature),
			PublicKeyAlgorithm:          cert.PublicKeyAlgorithm,
			PublicKey:                   x509PublicKey{N: pk.N.String(), E: pk.E},
			SerialNumber:                cert.SerialNumber.Int64(),
			Issuer:                      cert.Issuer,
			NotBefore:                   cert.NotBefore.Format(time.RFC3339),
			NotAfter:                    cert.NotAfter.Format(time.RFC3339),
			KeyUsage:                    cert.KeyUsage,
			Extensions:                  cert.Extensions,
			ExtraExtensions:             cert.ExtraExtensions,
			ExtKeyUsage:                 cert.ExtKeyUsage,
			BasicConstraintsValid:       cert.BasicConstraintsValid,
			IsCA:                        cert.IsCA,
			MaxPathLen:                  cert.MaxPathLen,
			MaxPathLenZero:              cert.MaxPathLenZero,
			AuthorityKeyId:              cert.AuthorityKeyId,
			OCSPServer:                  cert.OCSPServer,
			IssuingCertificateURL:       cert.IssuingCertificateURL,
			DNSNames:                    cert.DNSNames,
			EmailAddresses:              cert.EmailAddresses,
			IPAddresses:                 cert.IPAddresses,
			PermittedDNSDomainsCritical: cert.PermittedDNSDomainsCritical,
			PermittedDNSDomains:         cert.PermittedDNSDomains,
			ExcludedDNSDomains:          cert.ExcludedDNSDomains,
			PermittedIPRanges:           cert.PermittedIPRanges,
			ExcludedIPRanges:            cert.ExcludedIPRanges,
			PermittedEmailAddresses:     cert.PermittedEmailAddresses,
			ExcludedEmailAddresses:      cert.ExcludedEmailAddresses,
			PermittedURIDomains:         cert.PermittedURIDomains,
			ExcludedURIDomains:          cert.ExcludedURIDomains,
			CRLDistributionPoints:       cert.CRLDistributionPoints,
			PolicyIdentifiers:           cert.PolicyIdentifiers,
		})
	case "CERTIFICATE REQUEST":
		csr, err := x509.ParseCertificateRequest(block.Bytes)
		if err != nil {
			return nil, err
		}
		if csr.PublicKeyAlgorithm != x509.RSA {
			return nil, errors.New("certificate should use rsa algorithm")
		}
		pk, err := parseRSASubjectPublicKeyInfo(csr.RawSubjectPublicKeyInfo)
		if err != nil {
			return nil, errors.New("failed to parse subject public key info")
		}
		csr.PublicKey = x509PublicKey{N: pk.N.String(), E: pk.E}
		return encodeJSONMap(csr)
	default:
		return nil, errors.New("PEM block neither contains a CERTIFICATE or CERTIFICATE REQUEST")
	}
}

func b64(data []byte) string { return base64.StdEncoding.EncodeToString(data) }

func encodeJSONMap(in any) (map[string]any, error) {
	buf := new(bytes.Buffer)
	if err := json.NewEncoder(buf).Encode(in); err != nil {
		return nil, err
	}
	res := map[string]any{}
	if err := json.Unmarshal(buf.Bytes(), &res); err != nil {
		return nil, err
	}
	return res, nil
}

// parseRSASubjectPublicKeyInfo reads the PKCS #1 RSA key of a
// SubjectPublicKeyInfo, as Kyverno does with cryptobyte.
func parseRSASubjectPublicKeyInfo(data []byte) (*rsa.PublicKey, error) {
	var spki struct {
		Algorithm asn1.RawValue
		PublicKey asn1.BitString
	}
	if _, err := asn1.Unmarshal(data, &spki); err != nil {
		return nil, err
	}
	return x509.ParsePKCS1PublicKey(spki.PublicKey.Bytes)
}
