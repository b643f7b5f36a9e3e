package devenv

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// symlinkedRepo makes a directory and a symlink to it, as a checkout
// reached through a symlinked folder, and returns (physical, logical).
func symlinkedRepo(t *testing.T) (string, string) {
	t.Helper()
	// The temp dir itself may lie behind a symlink (/tmp on macOS).
	tmp, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	real := filepath.Join(tmp, "real")
	if err := os.MkdirAll(filepath.Join(real, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(tmp, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	return real, link
}

// TestSameDirThroughSymlink: bin/controlplane of a checkout reached through
// a symlink is the same directory as its physical path (what the Makefile
// exports as KUBEBUILDER_ASSETS), also before it exists; other directories
// are not.
func TestSameDirThroughSymlink(t *testing.T) {
	real, link := symlinkedRepo(t)
	cases := []struct {
		name string
		a, b string
		want bool
	}{
		{name: "missing leaf through the link", a: filepath.Join(real, "bin", "controlplane"), b: filepath.Join(link, "bin", "controlplane"), want: true},
		{name: "missing parent too", a: filepath.Join(real, "nope", "controlplane"), b: filepath.Join(link, "nope", "controlplane"), want: true},
		{name: "existing directory", a: filepath.Join(real, "bin"), b: filepath.Join(link, "bin") + "/", want: true},
		{name: "unclean path", a: filepath.Join(real, "bin", "controlplane"), b: link + "/bin/../bin/./controlplane", want: true},
		{name: "other directory", a: filepath.Join(real, "bin", "controlplane"), b: filepath.Join(link, "bin", "assets"), want: false},
		{name: "sibling of the link", a: filepath.Join(real, "bin"), b: filepath.Join(filepath.Dir(link), "bin"), want: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := sameDir(tc.a, tc.b); got != tc.want {
				t.Errorf("sameDir(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
			if got := sameDir(tc.b, tc.a); got != tc.want {
				t.Errorf("sameDir(%q, %q) = %v, want %v", tc.b, tc.a, got, tc.want)
			}
		})
	}
}

// TestBuildControlPlaneThroughSymlink: on the first `make quickstart` of a
// checkout reached through a symlink, KUBEBUILDER_ASSETS is the physical
// bin/controlplane (the Makefile's $(CURDIR)) while the repository root is
// the logical working directory; up must still build the control plane
// with `make controlplane` rather than stop on "missing". make is a script
// here that records its arguments and writes the two binaries.
func TestBuildControlPlaneThroughSymlink(t *testing.T) {
	real, link := symlinkedRepo(t)
	for _, b := range []string{"fleet-controller", "fleet-agent"} {
		if err := os.WriteFile(filepath.Join(real, "bin", b), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tools := t.TempDir()
	makeScript := "#!/bin/sh\necho \"$@\" > make.args\nmkdir -p bin/controlplane && touch bin/controlplane/kube-apiserver bin/controlplane/etcd\n"
	if err := os.WriteFile(filepath.Join(tools, "make"), []byte(makeScript), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", tools+string(os.PathListSeparator)+os.Getenv("PATH"))

	var out bytes.Buffer
	e := &Env{opts: Options{RepoRoot: link, AssetsDir: filepath.Join(real, "bin", "controlplane"), SkipBuild: true, Out: &out}}
	if err := e.build(context.Background()); err != nil {
		t.Fatalf("build: %v\n%s", err, out.String())
	}
	args, err := os.ReadFile(filepath.Join(real, "make.args"))
	if err != nil || strings.TrimSpace(string(args)) != "controlplane" {
		t.Fatalf("make was not run as `make controlplane` (args %q, %v):\n%s", args, err, out.String())
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if !fileExists(filepath.Join(real, "bin", "controlplane", b)) {
			t.Errorf("%s not built into bin/controlplane", b)
		}
	}

	// KUBEBUILDER_ASSETS elsewhere: nothing is built there.
	if err := os.Remove(filepath.Join(real, "make.args")); err != nil {
		t.Fatal(err)
	}
	e.opts.AssetsDir = filepath.Join(t.TempDir(), "assets")
	if err := e.build(context.Background()); err == nil || !strings.Contains(err.Error(), "missing in "+e.opts.AssetsDir+" (KUBEBUILDER_ASSETS)") {
		t.Errorf("assets elsewhere: err = %v, want them named missing", err)
	}
	if fileExists(filepath.Join(real, "make.args")) {
		t.Errorf("make ran for KUBEBUILDER_ASSETS outside the repository")
	}
}
