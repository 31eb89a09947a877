package psa

import (
	"strings"
	"testing"

	apiv1 "k8s.io/pod-security-admission/admission/api/v1"
	"k8s.io/pod-security-admission/api"
)

func TestIsControllerServiceAccount(t *testing.T) {
	for u, want := range map[string]bool{
		"system:serviceaccount:kube-system:replicaset-controller":     true,
		"system:serviceaccount:kube-system:daemon-set-controller":     true,
		"system:serviceaccount:kube-system:job-controller":            true,
		"system:serviceaccount:kube-system:-controller":               false,
		"system:serviceaccount:kube-system:generic-garbage-collector": false,
		"system:serviceaccount:team-a:replicaset-controller":          false,
		"alice":                          false,
		"system:kube-controller-manager": false,
	} {
		if got := IsControllerServiceAccount(u); got != want {
			t.Errorf("IsControllerServiceAccount(%q) = %v, want %v", u, got, want)
		}
	}
}

func TestControllerWarnings(t *testing.T) {
	c, errs := CompileConfig(&apiv1.PodSecurityConfiguration{Exemptions: apiv1.PodSecurityExemptions{
		Usernames: []string{"alice", "system:serviceaccount:kube-system:replicaset-controller", "system:serviceaccount:kube-system:cronjob-controller"},
	}})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	w := c.Warnings()
	if len(w) != 2 || !strings.Contains(w[0], `"system:serviceaccount:kube-system:cronjob-controller"`) ||
		!strings.Contains(w[1], `"system:serviceaccount:kube-system:replicaset-controller"`) ||
		!strings.Contains(w[1], "every user who can create the workload resources it manages is implicitly exempt") {
		t.Fatalf("warnings: %q", w)
	}
}

func TestDefaultConfig(t *testing.T) {
	p := DefaultConfig().Defaults()
	if !p.FullyPrivileged() || !p.Enforce.Latest() || !p.Audit.Latest() || !p.Warn.Latest() {
		t.Fatalf("defaults: %v", p.String())
	}
	if p.Enforce.Level != api.LevelPrivileged {
		t.Fatal(p.Enforce)
	}
}
