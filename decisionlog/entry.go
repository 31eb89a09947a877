package decisionlog

import "time"

// Entry is one decision line.
type Entry struct {
	// DecisionID is the decision_id of the response.
	DecisionID string    `json:"decisionId"`
	Time       time.Time `json:"time"`
	Revision   uint64    `json:"revision"`
	Digest     string    `json:"digest"`
	// Caller is the caller's identity (cn:..., uri:..., token:...,
	// anonymous).
	Caller  string  `json:"caller"`
	Request Request `json:"request"`
	Allowed bool    `json:"allowed"`
	// DryRun marks a dry-run request (nothing was admitted).
	DryRun bool `json:"dryRun,omitempty"`
	// Message is the denial message.
	Message  string   `json:"message,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	Results  []Result `json:"results"`
	// Exceptions are the exceptions (namespace/name) granted and refused in
	// this decision.
	Exceptions Exceptions `json:"exceptions"`
	// DurationSeconds is the time taken to decide.
	DurationSeconds float64 `json:"durationSeconds"`
	// ContextReads are the context objects and GlobalContextEntries the
	// decision read (resource.Get, resource.List, globalContext.Get,
	// image.GetMetadata): keys and counts, never their content.
	ContextReads []ContextRead `json:"contextReads,omitempty"`
	// Calls are the calls out the decision made (http.*, resource.Post):
	// what was called and what came back, never headers or bodies.
	Calls []Call `json:"calls,omitempty"`
	// Object and OldObject are the request's objects, masked (only when
	// the log includes objects).
	Object    map[string]any `json:"object,omitempty"`
	OldObject map[string]any `json:"oldObject,omitempty"`
}

// Request summarizes the request.
type Request struct {
	APIVersion  string   `json:"apiVersion,omitempty"`
	Kind        string   `json:"kind"`
	Resource    string   `json:"resource,omitempty"`
	SubResource string   `json:"subResource,omitempty"`
	Namespace   string   `json:"namespace,omitempty"`
	Name        string   `json:"name,omitempty"`
	Operation   string   `json:"operation"`
	User        string   `json:"user,omitempty"`
	Groups      []string `json:"groups,omitempty"`
	// Mode is admission or background.
	Mode string `json:"mode,omitempty"`
}

// Result is one policy result.
type Result struct {
	Policy     string   `json:"policy"`
	PolicyKind string   `json:"policyKind"`
	Rule       string   `json:"rule,omitempty"`
	Result     string   `json:"result"`
	Message    string   `json:"message,omitempty"`
	Actions    []string `json:"actions,omitempty"`
	Exceptions []string `json:"exceptions,omitempty"`
}

// Exceptions are the exceptions granted and refused in a decision.
type Exceptions struct {
	Granted []string `json:"granted,omitempty"`
	Refused []string `json:"refused,omitempty"`
	// Expired are expired exceptions bound to a policy that applied.
	Expired []string `json:"expired,omitempty"`
}

// ContextRead is one read of a decision: a resource.Get (op "get":
// apiVersion, resource, namespace, name; count 1 when found), a
// resource.List (op "list": apiVersion, resource, namespace, selector;
// count of objects listed), a globalContext.Get (op "globalContext": name
// of the entry, projection; count 1 when it had data) or an
// image.GetMetadata (op "image": name is the image).
type ContextRead struct {
	Op         string `json:"op"`
	APIVersion string `json:"apiVersion,omitempty"`
	Resource   string `json:"resource,omitempty"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name,omitempty"`
	Selector   string `json:"selector,omitempty"`
	Projection string `json:"projection,omitempty"`
	Count      int    `json:"count"`
	Error      string `json:"error,omitempty"`
}

// Call is one call out of a decision.
type Call struct {
	Function string `json:"function"`
	Method   string `json:"method,omitempty"`
	URL      string `json:"url"`
	// Location is where redirects led.
	Location string `json:"location,omitempty"`
	Resource string `json:"resource,omitempty"`
	Status   int    `json:"status,omitempty"`
	// DurationSeconds is how long the call took.
	DurationSeconds float64 `json:"durationSeconds"`
	ResponseBytes   int64   `json:"responseBytes,omitempty"`
	// Refused says the server's configuration refused it (nothing sent).
	Refused bool   `json:"refused,omitempty"`
	Error   string `json:"error,omitempty"`
}
