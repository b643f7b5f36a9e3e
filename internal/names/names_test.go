package names

import (
	"strings"
	"testing"
)

func TestClusterNamespace(t *testing.T) {
	got := ClusterNamespace("fleet-local", "local")
	if !strings.HasPrefix(got, "cluster-fleet-local-local-") || len(got) != len("cluster-fleet-local-local-")+12 {
		t.Fatalf("unexpected namespace %q", got)
	}
	if ClusterNamespace("a", "b") == ClusterNamespace("a-b", "") {
		t.Fatal("hash must separate workspace and name")
	}
	long := ClusterNamespace(strings.Repeat("w", 40), strings.Repeat("n", 40))
	if len(long) > 63 {
		t.Fatalf("namespace too long: %d", len(long))
	}
}

func TestHelmReleaseName(t *testing.T) {
	cases := []struct{ in, want string }{
		{"simple", "simple"},
		{"repo-path", "repo-path"},
	}
	for _, c := range cases {
		if got := HelmReleaseName(c.in); got != c.want {
			t.Errorf("HelmReleaseName(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	for _, in := range []string{"My/Repo/Path", "a_b", strings.Repeat("x", 80), "repo/" + strings.Repeat("deep/", 20)} {
		got := HelmReleaseName(in)
		if len(got) > MaxHelmReleaseNameLen || !dnsLabel.MatchString(got) {
			t.Errorf("HelmReleaseName(%q) = %q is not a valid release name", in, got)
		}
	}
	if HelmReleaseName("a_b") == HelmReleaseName("a.b") {
		t.Error("distinct inputs must give distinct names")
	}
}

func TestRegistrationSecretName(t *testing.T) {
	a := RegistrationSecretName("id", "r1")
	if len(a) > 63 || !strings.HasPrefix(a, "c-") {
		t.Fatalf("bad name %q", a)
	}
	if a == RegistrationSecretName("id", "r2") {
		t.Fatal("random must change the name")
	}
}
