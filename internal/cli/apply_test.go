package cli

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files of fleet apply -o -")

// runFleet runs the fleet command in dir and returns stdout, stderr, error.
func runFleet(t *testing.T, dir, stdin string, args ...string) (string, string, error) {
	t.Helper()
	t.Chdir(dir)
	t.Setenv("COMMIT", "")
	t.Setenv("HELM_USERNAME", "")
	root := NewRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), errOut.String(), err
}

// Absolute paths, resolved before any test changes the working directory.
var (
	corpusDir, _ = filepath.Abs("../bundlereader/testdata/repo")
	goldenDir, _ = filepath.Abs("testdata/apply")
)

func corpus(*testing.T) string { return corpusDir }

// TestApplyGolden checks `fleet apply -o -` over the example repositories:
// the output is complete (every fleet.yaml key), stable and sorted.
func TestApplyGolden(t *testing.T) {
	targets := filepath.Join(goldenDir, "targets.yaml")
	cases := []struct {
		name  string
		args  []string
		stdin string
	}{
		{name: "simple", args: []string{"test", "simple"}},
		{name: "everykey", args: []string{"test", "everykey"}},
		{name: "overlays", args: []string{"test", "overlays"}},
		{name: "kustomize", args: []string{"test", "kustomize"}},
		{name: "helm-local", args: []string{"test", "helm-local"}},
		{name: "chart-root", args: []string{"test", "chart-root"}},
		{name: "shared-chart", args: []string{"test", "uses-shared"}},
		{name: "override-targets", args: []string{"test", "override", "--targets-file", targets}},
		{name: "glob", args: []string{"repo", "over*", "kustomize"}},
		{name: "stdin", args: []string{"test", "simple/sub", "-f", "-"}, stdin: "defaultNamespace: from-stdin\nlabels:\n  via: stdin\n"},
		{name: "flags", args: []string{"my-repo", "simple", "-l", "fleet.cattle.io/repo-name=my-repo", "-l", "extra=yes",
			"--targets-file", targets, "--paused", "--target-namespace", "tns", "-a", "sa", "--keep-resources",
			"--delete-namespace", "--correct-drift-force", "--commit", "abc123", "--sync-generation", "7", "-n", "workspace"}},
		{name: "compress", args: []string{"test", "simple/nested", "-c"}},
		// One bundle per PATH, nothing discovered below it as a bundle of
		// its own (simple/nested, fleet.yaml and all, is part of simple's
		// bundle, as in Rancher Fleet), and an options file named after the
		// separator.
		{name: "driven", args: []string{"test", "--driven-scan", "simple", "kustomize#fleet.yaml", "--driven-scan-sep", "#"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"apply", "-o", "-", "-n", "fleet-local"}, tc.args...)
			out, _, err := runFleet(t, corpus(t), tc.stdin, args...)
			if err != nil {
				t.Fatalf("fleet %s: %v", strings.Join(args, " "), err)
			}
			golden := filepath.Join(goldenDir, tc.name+".golden.yaml")
			if *update {
				if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("missing golden file (run with -update): %v", err)
			}
			if out != string(want) {
				t.Errorf("output differs from %s (rerun with -update if intended):\n%s", golden, out)
			}
			// Stable: a second run gives the same bytes.
			again, _, err := runFleet(t, corpus(t), tc.stdin, args...)
			if err != nil || again != out {
				t.Errorf("second run differs (err %v)", err)
			}
		})
	}
}

// TestApplyBadInput: each bad input fails with a precise message and
// nothing is printed (never a partial set of bundles).
func TestApplyBadInput(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{name: "missing path", args: []string{"test", "does-not-exist"}, want: `path "does-not-exist" does not exist`},
		{name: "no name", args: []string{}, want: "requires at least 1 arg"},
		{name: "empty name", args: []string{"", "simple"}, want: "NAME must not be empty"},
		{name: "blank name", args: []string{" ", "."}, want: "NAME must not be empty"},
		{name: "bad targets file", args: []string{"test", "simple", "--targets-file", "nope.yaml"}, want: "--targets-file"},
		{name: "invalid fleet.yaml", args: []string{"test", "simple/sub", "-f", "-"}, want: "simple/sub/fleet.yaml: invalid YAML"},
		{name: "-f with two paths", args: []string{"test", "simple", "kustomize", "-f", "-"}, want: "-f applies to a single PATH"},
		{name: "driven scan with -f", args: []string{"test", "simple", "--driven-scan", "-f", "-"}, want: "-f and --driven-scan exclude each other"},
		{name: "driven scan, two separators", args: []string{"test", "--driven-scan", "simple:a.yaml:b.yaml"}, want: "more than one \":\""},
		{name: "driven scan outside", args: []string{"test", "--driven-scan", "../x"}, want: "outside the working directory"},
		{name: "driven scan, no options file", args: []string{"test", "--driven-scan", "simple:prod.yaml"}, want: "options file simple/prod.yaml does not exist"},
		{name: "too big", args: []string{"test", "everykey", "--max-bundle-size", "1000"}, want: `bundle "every-key" is`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"apply", "-o", "-"}, tc.args...)
			out, _, err := runFleet(t, corpus(t), "key: [unclosed", args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
			if out != "" {
				t.Errorf("printed output despite the error:\n%s", out)
			}
		})
	}
}

// TestApplyWarnsUnknownKeys: unknown fleet.yaml keys are warnings on stderr.
func TestApplyWarnsUnknownKeys(t *testing.T) {
	_, stderr, err := runFleet(t, corpus(t), "helm:\n  valuesFile: x.yaml\nnamepsace: typo\n", "apply", "-o", "-", "test", "simple/sub", "-f", "-")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`unknown key "helm.valuesFile"`, `unknown key "namepsace"`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q lacks %q", stderr, want)
		}
	}
}

// TestApplyCredentialFlags: the Helm credential flags reach the reader
// options (password from a file, CA bundle, per-path credentials).
func TestApplyCredentialFlags(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	f := &ApplyFlags{
		Username:            "alice",
		PasswordFile:        write("pw", "s3cret\n"),
		CACertsFile:         write("ca.pem", "PEM"),
		HelmCredsByPathFile: write("bypath.yaml", "./charts/a:\n  username: bob\n  password: pw2\n  insecureSkipVerify: true\n  basicHTTP: true\n  caBundle: UEVN\n"),
		HelmInsecureSkipTLS: true,
		HelmRepoURLRegex:    "^https://charts",
		CorrectKeepFail:     true,
	}
	o, err := f.ReadOptions("ws", strings.NewReader(""), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.Auth.Username != "alice" || o.Auth.Password != "s3cret" || string(o.Auth.CABundle) != "PEM" || !o.Auth.InsecureSkipTLS || o.HelmRepoURLRegex != "^https://charts" {
		t.Errorf("auth = %+v", o.Auth)
	}
	if a := o.AuthByPath["charts/a"]; a.Username != "bob" || a.Password != "pw2" || !a.InsecureSkipTLS || !a.BasicHTTP || string(a.CABundle) != "PEM" {
		t.Errorf("by path = %+v", o.AuthByPath)
	}
	if o.CorrectDrift == nil || !o.CorrectDrift.Enabled || !o.CorrectDrift.KeepFailHistory {
		t.Errorf("correctDrift = %+v", o.CorrectDrift)
	}
	f.HelmCredsByPathFile = write("bad.yaml", "a:\n  usr: x\n")
	if _, err := f.ReadOptions("ws", nil, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "--helm-credentials-by-path-file") {
		t.Errorf("bad by-path file: err = %v", err)
	}
}

// TestApplyAcceptsOCIRegistrySecret: Fleet's flag is accepted, warned
// about, and changes nothing in the bundles.
func TestApplyAcceptsOCIRegistrySecret(t *testing.T) {
	plain, _, err := runFleet(t, corpus(t), "", "apply", "-o", "-", "test", "simple")
	if err != nil {
		t.Fatal(err)
	}
	out, stderr, err := runFleet(t, corpus(t), "", "apply", "-o", "-", "--oci-registry-secret", "oci-creds", "test", "simple")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "--oci-registry-secret is ignored") {
		t.Errorf("stderr %q has no warning", stderr)
	}
	if out != plain {
		t.Errorf("the flag changed the bundles")
	}
}
