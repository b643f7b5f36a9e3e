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

// TestHelmReleaseName pins names to Rancher Fleet's: a user moving a
// GitRepo over keeps its Bundles (a different name prunes the old Bundle,
// uninstalling its releases) and its dependsOn references. The first block
// is Rancher's own test table, the rest was computed from its algorithm.
func TestHelmReleaseName(t *testing.T) {
	const (
		str50 = "1234567890" + "1234567890" + "1234567890" + "1234567890" + "1234567890"
		str53 = str50 + "123"
		str63 = str50 + "1234567890" + "123"
	)
	cases := []struct{ in, want string }{
		// rancher/fleet internal/names/name_test.go
		{in: str53, want: str53},
		{in: str53 + "a", want: "12345678901234567890123456789012345678901234567-fdba4"},
		{in: str63 + "a", want: "12345678901234567890123456789012345678901234567-eb12d"},
		{in: "long-name-test-shortpath-with@char", want: "long-name-test-shortpath-with-char-031bab5e"},
		{in: "long-name-test-shortpath-with+char", want: "long-name-test-shortpath-with-char-21c88393"},
		{in: "long-name-test-0.App_ ", want: "long-name-test-0-app-5bf6b3fb"},
		{in: "long-name-test--App_-_12.factor", want: "long-name-test-app-12-factor-0efbac37"},
		{in: "bundle.name.example.com", want: "bundle-name-example-com-645ef821"},
		{in: str53[0:46] + "-1234567", want: "1234567890123456789012345678901234567890123456-d0bce"},
		// GitRepo name joined with a bundle path.
		{in: "simple", want: "simple"},
		{in: "repo/app", want: "repo-app"},
		{in: "repo/app/inner", want: "repo-app-inner"},
		{in: "a/b/c", want: "a-b-c"},
		{in: "repo/dir/", want: "repo-dir"},
		{in: "-a-", want: "a"},
		// Upper case and "." or "_" need the md5 of the name after "/" became
		// "-" (not of the original input).
		{in: "repo/App", want: "repo-app-a3861833"},
		{in: "repo/my_app", want: "repo-my-app-98826427"},
		{in: "repo/nginx-1.2", want: "repo-nginx-1-2-7b552ce9"},
		{in: "repo/Mixed_Case", want: "repo-mixed-case-7e57bc11"},
		{in: "Custom.Name", want: "custom-name-53c0fe75"},
		{in: "UPPER", want: "upper-9e43f529"},
		{in: "a_b", want: "a-b-dbf08e00"},
		{in: "a.b", want: "a-b-e32b629f"},
		{in: "caf\u00e9", want: "caf-07117fe4"},
		{in: "repo/x_y/fleet-options", want: "repo-x-y-fleet-options-432434ed"},
		// Too long: cut to 47 characters, "-" and 5 hex of md5 of the whole.
		{in: "repo/a-very-long-directory-name-that-goes-on/and-on-and-on", want: "repo-a-very-long-directory-name-that-goes-on-an-3e4c2"},
		{in: "repo/" + strings.Repeat("deep/", 20), want: "repo-deep-deep-deep-deep-deep-deep-deep-deep-de-d2e94"},
		// Nothing valid is left: 24 hex of md5 of the original input.
		{in: "___", want: "948a13f1"},
		{in: "...", want: "2f43b42f"},
		{in: "", want: "d41d8cd98f00b204e9800998"},
	}
	for _, c := range cases {
		got := HelmReleaseName(c.in)
		if got != c.want {
			t.Errorf("HelmReleaseName(%q) = %q, want %q", c.in, got, c.want)
		}
		if len(got) > MaxHelmReleaseNameLen || !dnsLabel.MatchString(got) {
			t.Errorf("HelmReleaseName(%q) = %q is not a valid release name", c.in, got)
		}
	}
}

// TestLimit is Rancher Fleet's table for Limit plus the cut a label value
// gets (63): the hash is md5 of the whole input, and no "--" is produced.
func TestLimit(t *testing.T) {
	cases := []struct {
		in    string
		count int
		want  string
	}{
		{in: "1234567", count: 5, want: "12345"},
		{in: "1234567", count: 6, want: "123456"},
		{in: "1234567", count: 7, want: "1234567"},
		{in: "1234567", count: 8, want: "1234567"},
		{in: "12345678", count: 8, want: "12345678"},
		{in: "12345678", count: 7, want: "1-25d55"},
		{in: "123456789", count: 8, want: "12-25f9e"},
		{in: "1-3456789", count: 8, want: "1-9b657"},
		{in: strings.Repeat("x", 80), count: 63, want: strings.Repeat("x", 57) + "-46b05"},
	}
	for _, c := range cases {
		if got := Limit(c.in, c.count); got != c.want {
			t.Errorf("Limit(%q, %d) = %q, want %q", c.in, c.count, got, c.want)
		}
	}
}

// TestSafeConcatName is Rancher Fleet's table: cluster namespaces and
// registration ServiceAccounts must get the same names as there.
func TestSafeConcatName(t *testing.T) {
	a32 := strings.Repeat("a", 32)
	cases := []struct {
		in   []string
		want string
	}{
		{in: nil, want: ""},
		{in: []string{strings.Repeat("a", 63)}, want: strings.Repeat("a", 63)},
		{in: []string{strings.Repeat("a", 64)}, want: strings.Repeat("a", 57) + "-ffe05"},
		{in: []string{"first", "second", "third"}, want: "first-second-third"},
		{in: []string{a32, a32}, want: a32 + "-" + strings.Repeat("a", 24) + "-da5ed"},
		// The 57th character is not [a-z0-9]: cut at 56, and 6 hex.
		{in: []string{strings.Repeat("a", 56) + "-aaaaaaa"}, want: strings.Repeat("a", 56) + "-768c62"},
		{in: []string{strings.Repeat("a", 55) + "--aaaaaaa"}, want: strings.Repeat("a", 55) + "--9e8cfe"},
	}
	for _, c := range cases {
		if got := SafeConcatName(c.in...); got != c.want {
			t.Errorf("SafeConcatName(%q) = %q, want %q", c.in, got, c.want)
		}
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
