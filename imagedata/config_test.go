package imagedata

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	yamlv3 "go.yaml.in/yaml/v3"
	sigsyaml "sigs.k8s.io/yaml"
)

func TestConfigDefaults(t *testing.T) {
	got := Config{}.WithDefaults()
	want := Config{
		Timeout: Duration(10 * time.Second), CacheTTL: Duration(30 * time.Minute), TagTTL: Duration(30 * time.Second),
		CacheSize: 1000, MaxResponseBytes: 4 << 20, Platform: "linux/amd64",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("defaults %+v, want %+v", got, want)
	}
	set := Config{Timeout: Duration(time.Second), CacheSize: 5, Platform: "linux/arm64"}.WithDefaults()
	if set.Timeout != Duration(time.Second) || set.CacheSize != 5 || set.Platform != "linux/arm64" {
		t.Fatalf("set fields changed: %+v", set)
	}
}

func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config.json")
	if err := os.WriteFile(file, []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings of the error; none: valid
	}{
		{name: "zero", cfg: Config{}},
		{name: "everything set", cfg: Config{Timeout: Duration(time.Second), CacheTTL: Duration(time.Hour), TagTTL: Duration(time.Second),
			CacheSize: 10, MaxResponseBytes: 1 << 20, InsecureRegistries: []string{"localhost:5000", "docker.io", "10.0.0.1"},
			DockerConfig: file, Platform: "linux/arm/v7"}},
		{name: "negative durations", cfg: Config{Timeout: Duration(-time.Second), CacheTTL: Duration(-1), TagTTL: Duration(-1)},
			want: []string{"timeout: -1s is negative", "cacheTTL: -1ns is negative", "tagTTL: -1ns is negative"}},
		{name: "negative sizes", cfg: Config{CacheSize: -1, MaxResponseBytes: -2},
			want: []string{"cacheSize: -1 is negative", "maxResponseBytes: -2 is negative"}},
		{name: "insecure registry with a scheme", cfg: Config{InsecureRegistries: []string{"ok:5000", "http://reg:5000"}},
			want: []string{`insecureRegistries[1]: "http://reg:5000" is not a registry host[:port]`}},
		{name: "insecure registry with a path", cfg: Config{InsecureRegistries: []string{"reg/team"}},
			want: []string{`insecureRegistries[0]: "reg/team" is not a registry host[:port]`}},
		{name: "empty insecure registry", cfg: Config{InsecureRegistries: []string{""}},
			want: []string{"insecureRegistries[0]: empty registry name"}},
		{name: "bad platform", cfg: Config{Platform: "amd64"}, want: []string{`platform: "amd64" is not os/arch[/variant]`}},
		{name: "missing docker config", cfg: Config{DockerConfig: filepath.Join(dir, "nope.json")},
			want: []string{"dockerConfig: stat " + filepath.Join(dir, "nope.json")}},
		{name: "docker config directory", cfg: Config{DockerConfig: dir}, want: []string{"dockerConfig: " + dir + " is a directory"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if _, err := New(tc.cfg, Options{}); err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if _, nerr := New(tc.cfg, Options{}); nerr == nil || nerr.Error() != err.Error() {
				t.Errorf("New: %v, want the Validate error", nerr)
			}
		})
	}
}

// TestConfigDecode: the config reads from YAML (as the server's config file
// is read: sigs.k8s.io/yaml, or yaml.v3) and JSON, and writes back the same.
func TestConfigDecode(t *testing.T) {
	const doc = `
timeout: 5s
cacheTTL: 1h
tagTTL: 1m30s
cacheSize: 50
maxResponseBytes: 1048576
insecureRegistries: [localhost:5000]
dockerConfig: /etc/arbiter/docker/config.json
platform: linux/arm64
`
	want := Config{
		Timeout: Duration(5 * time.Second), CacheTTL: Duration(time.Hour), TagTTL: Duration(90 * time.Second),
		CacheSize: 50, MaxResponseBytes: 1 << 20, InsecureRegistries: []string{"localhost:5000"},
		DockerConfig: "/etc/arbiter/docker/config.json", Platform: "linux/arm64",
	}
	var viaSigs, viaV3, viaJSON Config
	if err := sigsyaml.UnmarshalStrict([]byte(doc), &viaSigs); err != nil {
		t.Fatal(err)
	}
	if err := yamlv3.Unmarshal([]byte(doc), &viaV3); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js, &viaJSON); err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]Config{"sigs.k8s.io/yaml": viaSigs, "yaml.v3": viaV3, "JSON round trip": viaJSON} {
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, want %+v", name, got, want)
		}
	}
	if !strings.Contains(string(js), `"tagTTL":"1m30s"`) {
		t.Errorf("JSON %s: durations are not strings", js)
	}

	for _, bad := range []struct{ doc, want string }{
		{"timeout: 5", "timeout"},
		{"timeout: soon", `want a duration such as "10s"`},
		{"cacheTime: 1h", `unknown field "cacheTime"`},
	} {
		var c Config
		if err := sigsyaml.UnmarshalStrict([]byte(bad.doc), &c); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: error %v, want %q", bad.doc, err, bad.want)
		}
	}
}
