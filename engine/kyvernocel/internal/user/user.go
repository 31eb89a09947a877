// Package user holds the Go type behind Kyverno's CEL type
// user.ServiceAccount. cel-go names a native type after the last element of
// its package path, so the type must live in a package named "user".
package user

// ServiceAccount is what parseServiceAccount returns. Its CEL fields are the
// Go field names, capitalised, as in Kyverno: sa.Name and sa.Namespace.
type ServiceAccount struct {
	Name      string `json:"name,omitempty"`
	Namespace string `json:"namespace,omitempty"`
}
