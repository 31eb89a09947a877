package kyvernoapi

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ImageValidatingPolicy is policies.kyverno.io ImageValidatingPolicy
// (v1alpha1, v1beta1, v1) and NamespacedImageValidatingPolicy (v1beta1,
// v1): one schema (github.com/kyverno/api v1alpha1, aliased by v1beta1 and
// v1). The attestor and attestation types are shared with the verifier
// that implements the verification functions outside the engine.
type ImageValidatingPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ImageValidatingPolicySpec `json:"spec"`
	// Status is accepted and ignored.
	Status map[string]any `json:"status,omitempty"`
}

// ImageValidatingPolicySpec is the spec of an ImageValidatingPolicy.
type ImageValidatingPolicySpec struct {
	MatchConstraints         *admissionregistrationv1.MatchResources    `json:"matchConstraints,omitempty"`
	FailurePolicy            *admissionregistrationv1.FailurePolicyType `json:"failurePolicy,omitempty"`
	AuditAnnotations         []admissionregistrationv1.AuditAnnotation  `json:"auditAnnotations,omitempty"`
	ValidationActions        []admissionregistrationv1.ValidationAction `json:"validationActions,omitempty"`
	MatchConditions          []admissionregistrationv1.MatchCondition   `json:"matchConditions,omitempty"`
	Variables                []admissionregistrationv1.Variable         `json:"variables,omitempty"`
	ValidationConfigurations *ImageValidationConfiguration              `json:"validationConfigurations,omitempty"`
	MatchImageReferences     []MatchImageReference                      `json:"matchImageReferences,omitempty"`
	Credentials              *ImageCredentials                          `json:"credentials,omitempty"`
	ImageExtractors          []ImageExtractor                           `json:"images,omitempty"`
	Attestors                []Attestor                                 `json:"attestors,omitempty"`
	Attestations             []Attestation                              `json:"attestations,omitempty"`
	Validations              []admissionregistrationv1.Validation       `json:"validations,omitempty"`
	WebhookConfiguration     *WebhookConfiguration                      `json:"webhookConfiguration,omitempty"`
	Evaluation               *EvaluationConfiguration                   `json:"evaluation,omitempty"`
	Autogen                  *ImageAutogenConfiguration                 `json:"autogen,omitempty"`
}

// EvaluationMode returns Kubernetes (default) or JSON.
func (s *ImageValidatingPolicySpec) EvaluationMode() string { return s.Evaluation.ModeOf() }

// AdmissionEnabled is evaluation.admission.enabled (default true).
func (s *ImageValidatingPolicySpec) AdmissionEnabled() bool { return s.Evaluation.AdmissionEnabled() }

// BackgroundEnabled is evaluation.background.enabled (default true).
func (s *ImageValidatingPolicySpec) BackgroundEnabled() bool {
	return s.Evaluation.BackgroundEnabled()
}

// Actions returns validationActions, defaulting to [Deny].
func (s *ImageValidatingPolicySpec) Actions() []admissionregistrationv1.ValidationAction {
	if len(s.ValidationActions) == 0 {
		return []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
	}
	return s.ValidationActions
}

// GetFailurePolicy returns failurePolicy, defaulting to Fail.
func (s *ImageValidatingPolicySpec) GetFailurePolicy() admissionregistrationv1.FailurePolicyType {
	if s.FailurePolicy == nil {
		return admissionregistrationv1.Fail
	}
	return *s.FailurePolicy
}

// MutateDigest, VerifyDigest and Required are validationConfigurations'
// switches; nil (and the CRD's default) is true for each.
func (s *ImageValidatingPolicySpec) MutateDigest() bool {
	return s.ValidationConfigurations == nil || boolOr(s.ValidationConfigurations.MutateDigest, true)
}

// VerifyDigest is validationConfigurations.verifyDigest (default true).
func (s *ImageValidatingPolicySpec) VerifyDigest() bool {
	return s.ValidationConfigurations == nil || boolOr(s.ValidationConfigurations.VerifyDigest, true)
}

// Required is validationConfigurations.required (default true).
func (s *ImageValidatingPolicySpec) Required() bool {
	return s.ValidationConfigurations == nil || boolOr(s.ValidationConfigurations.Required, true)
}

func boolOr(b *bool, def bool) bool {
	if b == nil {
		return def
	}
	return *b
}

// ImageValidationConfiguration is spec.validationConfigurations.
type ImageValidationConfiguration struct {
	MutateDigest *bool `json:"mutateDigest,omitempty"`
	VerifyDigest *bool `json:"verifyDigest,omitempty"`
	Required     *bool `json:"required,omitempty"`
}

// ImageAutogenConfiguration is spec.autogen of an ImageValidatingPolicy.
type ImageAutogenConfiguration struct {
	PodControllers *PodControllers `json:"podControllers,omitempty"`
}

// MatchImageReference is one of spec.matchImageReferences: a glob or a CEL
// expression over `ref`.
type MatchImageReference struct {
	Glob       string `json:"glob,omitempty"`
	Expression string `json:"expression,omitempty"`
}

// ImageExtractor is one of spec.images: a named CEL expression giving a
// list of image references.
type ImageExtractor struct {
	Name       string `json:"name"`
	Expression string `json:"expression"`
}

// Credential providers of spec.credentials.providers.
const (
	CredentialsProviderDefault = "default"
	CredentialsProviderAmazon  = "amazon"
	CredentialsProviderAzure   = "azure"
	CredentialsProviderGoogle  = "google"
	CredentialsProviderGitHub  = "github"
)

// ImageCredentials is spec.credentials: how the policy's registries are
// reached.
type ImageCredentials struct {
	AllowInsecureRegistry bool     `json:"allowInsecureRegistry,omitempty"`
	Providers             []string `json:"providers,omitempty"`
	Secrets               []string `json:"secrets,omitempty"`
}

// Attestor is one of spec.attestors: who must have signed, cosign or
// notary. In CEL, attestors.<name> is the attestor with its expressions
// evaluated.
type Attestor struct {
	Name   string  `json:"name"`
	Cosign *Cosign `json:"cosign,omitempty"`
	Notary *Notary `json:"notary,omitempty"`
}

// Cosign is a cosign attestor.
type Cosign struct {
	Key         *CosignKey          `json:"key,omitempty"`
	Keyless     *Keyless            `json:"keyless,omitempty"`
	Certificate *Certificate        `json:"certificate,omitempty"`
	Source      *Source             `json:"source,omitempty"`
	CTLog       *CTLog              `json:"ctlog,omitempty"`
	TUF         *TUF                `json:"tuf,omitempty"`
	Annotations map[string]string   `json:"annotations,omitempty"`
	TrustedRoot *StringOrExpression `json:"trustedRoot,omitempty"`
}

// StringOrExpression is a value, or a CEL expression giving it.
type StringOrExpression struct {
	Value      string `json:"value,omitempty"`
	Expression string `json:"expression,omitempty"`
}

// Notary is a notary attestor: trusted certificates, TSA certificates.
type Notary struct {
	Certs    *StringOrExpression `json:"certs,omitempty"`
	TSACerts *StringOrExpression `json:"tsaCerts,omitempty"`
}

// TUF is cosign.tuf: the TUF repository of the Sigstore trust root.
type TUF struct {
	Root   TUFRoot `json:"root,omitempty"`
	Mirror string  `json:"mirror,omitempty"`
}

// TUFRoot is the initial root of a TUF repository.
type TUFRoot struct {
	Path string `json:"path,omitempty"`
	Data string `json:"data,omitempty"`
}

// Source is cosign.source: where signatures are read.
type Source struct {
	Repository string `json:"repository,omitempty"`
	// PullSecrets is spelt so in the API.
	PullSecrets []LocalObjectReference `json:"PullSecrets,omitempty"`
	TagPrefix   string                 `json:"tagPrefix,omitempty"`
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	Name string `json:"name,omitempty"`
}

// CTLog is cosign.ctlog: transparency log and certificate transparency.
type CTLog struct {
	URL                string `json:"url,omitempty"`
	RekorPubKey        string `json:"rekorPubKey,omitempty"`
	CTLogPubKey        string `json:"ctLogPubKey,omitempty"`
	TSACertChain       string `json:"tsaCertChain,omitempty"`
	InsecureIgnoreTlog bool   `json:"insecureIgnoreTlog,omitempty"`
	InsecureIgnoreSCT  bool   `json:"insecureIgnoreSCT,omitempty"`
}

// CosignKey is cosign.key: a public key (PEM, KMS URI or CEL expression).
type CosignKey struct {
	Data          string `json:"data,omitempty"`
	KMS           string `json:"kms,omitempty"`
	HashAlgorithm string `json:"hashAlgorithm,omitempty"`
	Expression    string `json:"expression,omitempty"`
}

// Keyless is cosign.keyless: Fulcio certificate identities.
type Keyless struct {
	Identities           []Identity        `json:"identities,omitempty"`
	Roots                string            `json:"roots,omitempty"`
	AdditionalExtensions map[string]string `json:"additionalExtensions,omitempty"`
}

// Certificate is cosign.certificate: a signing certificate and its chain.
type Certificate struct {
	Certificate      *StringOrExpression `json:"cert,omitempty"`
	CertificateChain *StringOrExpression `json:"certChain,omitempty"`
}

// Identity is a keyless identity: issuer and subject, exact or regular
// expressions.
type Identity struct {
	Issuer            string `json:"issuer,omitempty"`
	Subject           string `json:"subject,omitempty"`
	IssuerRegExp      string `json:"issuerRegExp,omitempty"`
	SubjectRegExp     string `json:"subjectRegExp,omitempty"`
	SubjectExpression string `json:"subjectExpression,omitempty"`
}

// Attestation is one of spec.attestations: an in-toto predicate type or
// an OCI referrer artifact type. In CEL, attestations.<name> is the name.
type Attestation struct {
	Name     string    `json:"name"`
	InToto   *InToto   `json:"intoto,omitempty"`
	Referrer *Referrer `json:"referrer,omitempty"`
}

// InToto is attestation.intoto.
type InToto struct {
	Type string `json:"type"`
}

// Referrer is attestation.referrer.
type Referrer struct {
	Type string `json:"type"`
}
