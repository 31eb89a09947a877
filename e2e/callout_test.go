package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A policy that asks an HTTP service (http.Get) through `arbiter serve`
// configured with a callout section: an allowed URL is called and decides;
// a URL outside the allowlist is never called and is an error result
// naming the call; the decision log records the calls (no bodies); a
// config file with a misspelled callout field does not start.
func TestServeCallsOut(t *testing.T) {
	var calls atomic.Int32
	service := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if strings.HasSuffix(r.URL.Path, "/yes") {
			_, _ = io.WriteString(w, `{"allowed": true}`)
			return
		}
		_, _ = io.WriteString(w, `{"allowed": false, "reason": "not on the list"}`)
	}))
	defer service.Close()

	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(`apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: verdict-from-http}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  variables:
  - name: verdict
    expression: "http.Get(object.data.url)"
  validations:
  - expression: "variables.verdict.statusCode == 200 && variables.verdict.allowed == true"
    messageExpression: "'the service said no: ' + string(variables.verdict.reason)"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "arbiter.yaml")
	logPath := filepath.Join(dir, "decisions.jsonl")
	if err := os.WriteFile(config, []byte("decision-log: "+logPath+"\ncallout:\n  timeout: 2s\n  allowedURLPrefixes: ["+service.URL+"/verdict/]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	primary := startPrimary(t, "--config", config, "--load", policy)

	cm := func(url string) string {
		return `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"apps"},"data":{"url":"` + url + `"}}`
	}
	for _, tc := range []struct {
		url, want string
		code      int
	}{
		{service.URL + "/verdict/yes", "ALLOWED", 0},
		{service.URL + "/verdict/no", "the service said no: not on the list", 1},
		{service.URL + "/elsewhere/yes", `http.Get "` + service.URL + `/elsewhere/yes": URL is not allowed by the server's callout allowlist`, 1},
	} {
		f := filepath.Join(t.TempDir(), "cm.json")
		if err := os.WriteFile(f, []byte(cm(tc.url)), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := run(t, "decide", "--server", primary.addr, "-f", f)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Fatalf("%s: exit %d\n%s%s", tc.url, code, out, errOut)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d calls reached the service, want 2 (the refused URL is never called)", n)
	}

	// The decision log has each call, and no body.
	var logged []map[string]any
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		logged = logged[:0]
		data, _ := os.ReadFile(logPath)
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var e map[string]any
			if json.Unmarshal([]byte(line), &e) == nil {
				logged = append(logged, e)
			}
		}
		if len(logged) >= 3 {
			break
		}
	}
	if len(logged) != 3 {
		t.Fatalf("%d decision log lines, want 3", len(logged))
	}
	for i, e := range logged {
		calls, _ := e["calls"].([]any)
		if len(calls) != 1 {
			t.Fatalf("line %d: calls %v", i, e["calls"])
		}
		c := calls[0].(map[string]any)
		if c["function"] != "http.Get" || !strings.HasPrefix(c["url"].(string), service.URL) || strings.Contains(toJSON(c), "not on the list") {
			t.Fatalf("line %d: call %v", i, c)
		}
		if i == 2 && c["refused"] != true {
			t.Fatalf("the allowlist refusal is not recorded: %v", c)
		}
	}

	// A misspelled field of the callout section is refused at start.
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("callout:\n  allowedURLPrefix: [http://x/]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := run(t, "serve", "--config", bad, "--listen", freeAddr(t), "--data", t.TempDir())
	if code != 2 || !strings.Contains(errOut, `callout: json: unknown field "allowedURLPrefix"`) {
		t.Fatalf("bad callout section: exit %d: %s", code, errOut)
	}
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
