package cli

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
)

// resetKlog undoes what --debug-level does to the process-wide klog.
func resetKlog(t *testing.T) {
	t.Cleanup(func() {
		klog.ClearLogger()
		fs := flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(fs)
		_ = fs.Set("v", "0")
	})
}

// TestApplyAcceptsFleetFlags: the flags of Fleet's `fleet apply` that this
// CLI does not act on, or acts on differently, are accepted, so that
// scripts written for Fleet run; the ignored ones are warned about and the
// bundles are the same.
func TestApplyAcceptsFleetFlags(t *testing.T) {
	resetKlog(t)
	plain, stderr, err := runFleet(t, corpus(t), "", "apply", "-o", "-", "r", "simple")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stderr, "bundle built") {
		t.Errorf("debug output without --debug: %q", stderr)
	}
	out, stderr, err := runFleet(t, corpus(t), "", "apply", "r", "--debug",
		"--bundle-creation-max-concurrency", "4", "-o", "-", "simple")
	if err != nil {
		t.Fatal(err)
	}
	if out != plain || !strings.Contains(out, "name: r-simple\n") {
		t.Errorf("the flags changed the bundles:\n%s", out)
	}
	for _, want := range []string{"bundle built", "r-simple"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q lacks %q", stderr, want)
		}
	}

	out, stderr, err = runFleet(t, corpus(t), "", "--debug-level", "2", "apply", "--imagescan-enabled", "-o", "-", "r", "simple")
	if err != nil {
		t.Fatal(err)
	}
	if out != plain || !strings.Contains(stderr, "--imagescan-enabled is ignored") || !strings.Contains(stderr, "bundle built") {
		t.Errorf("--debug-level 2 --imagescan-enabled: stderr %q", stderr)
	}
	if !klog.V(2).Enabled() || klog.V(3).Enabled() {
		t.Errorf("--debug-level 2 did not set klog's verbosity to 2")
	}

	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{args: []string{"--bundle-creation-max-concurrency", "-1"}, want: "--bundle-creation-max-concurrency must not be negative"},
		{env: "many", want: `FLEET_BUNDLE_CREATION_MAX_CONCURRENCY="many": not a number`},
		{args: []string{"--debug-level", "-1"}, want: "--debug-level must not be negative"},
	} {
		t.Setenv(maxConcurrencyEnv, tc.env)
		args := append([]string{"apply", "-o", "-", "r", "simple"}, tc.args...)
		if _, _, err := runFleet(t, corpus(t), "", args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v (env %q): error %v, want %q", tc.args, tc.env, err, tc.want)
		}
	}
}

// TestApplyOptionsConcurrency: --bundle-creation-max-concurrency is how
// many bundles are written at once; -b never prunes.
func TestApplyOptionsConcurrency(t *testing.T) {
	repo := map[string]string{fleet.RepoLabel: "r"}
	o := (&ApplyFlags{MaxConcurrency: 4}).applyOptions("ws", repo)
	if o.Parallel != 4 || o.Namespace != "ws" || o.PruneSelector[fleet.RepoLabel] != "r" {
		t.Errorf("options = %+v", o)
	}
	if o := (&ApplyFlags{}).applyOptions("ws", nil); o.Parallel != 0 || o.PruneSelector != nil {
		t.Errorf("default options = %+v (0 is apply.DefaultParallel, %d)", o, apply.DefaultParallel)
	}
	if o := (&ApplyFlags{BundleFile: "b.yaml"}).applyOptions("ws", repo); o.PruneSelector != nil {
		t.Errorf("-b prunes: %+v", o)
	}
}

// TestApplyBundleFile: -b writes the Bundles of a file (such as the output
// of -o) instead of reading PATHs, in the namespace of -n and with the
// labels of -l.
func TestApplyBundleFile(t *testing.T) {
	built, _, err := runFleet(t, corpus(t), "", "apply", "-o", "-", "test", "simple", "kustomize")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "bundles.yaml")
	if err := os.WriteFile(file, []byte(built), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := runFleet(t, dir, "", "apply", "-o", "-", "ignored", "-b", file)
	if err != nil {
		t.Fatal(err)
	}
	if out != built {
		t.Errorf("-b did not give back the bundles of the file:\n%s\nwant\n%s", out, built)
	}
	// From stdin, into another namespace, with labels.
	out, stderr, err := runFleet(t, dir, built, "apply", "-o", "-", "-n", "other", "-l", "extra=yes", "--paused", "x", "--bundle-file", "-")
	if err != nil {
		t.Fatal(err)
	}
	n := strings.Count(built, "kind: Bundle\n")
	if n < 2 || strings.Count(out, "namespace: other\n") != n || strings.Count(out, "extra: \"yes\"\n") != n || strings.Contains(out, "paused") {
		t.Errorf("-n/-l not applied to the bundles of the file:\n%s", out)
	}
	if !strings.Contains(stderr, "written to namespace other") || !strings.Contains(stderr, "--paused is ignored with -b") {
		t.Errorf("stderr %q", stderr)
	}

	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{name: "with a PATH", args: []string{"x", "-b", file, "simple"}, want: "reads no PATH"},
		{name: "with -f", args: []string{"x", "-b", file, "-f", "fleet.yaml"}, want: "-b and -f exclude each other"},
		{name: "with --driven-scan", args: []string{"x", "-b", file, "--driven-scan"}, want: "-b and --driven-scan exclude each other"},
		{name: "missing", args: []string{"x", "-b", "nope.yaml"}, want: "-b: open nope.yaml"},
		{name: "not a bundle", args: []string{"x", "-b", write("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")}, want: "document 1 is v1 ConfigMap, not a fleet.cattle.io/v1alpha1 Bundle"},
		{name: "misspelt field", args: []string{"x", "-b", write("typo.yaml", "apiVersion: fleet.cattle.io/v1alpha1\nkind: Bundle\nmetadata: {name: a}\nspec: {pasued: true}\n")}, want: `unknown field "pasued"`},
		{name: "no name", args: []string{"x", "-b", write("noname.yaml", "apiVersion: fleet.cattle.io/v1alpha1\nkind: Bundle\nspec: {}\n")}, want: "has no metadata.name"},
		{name: "empty", args: []string{"x", "-b", write("empty.yaml", "---\n# nothing\n")}, want: "no Bundle found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runFleet(t, dir, "", append([]string{"apply", "-o", "-"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
			if out != "" {
				t.Errorf("printed output despite the error:\n%s", out)
			}
		})
	}
}

// TestApplyBundleFileToCluster: -b writes the file's Bundles to the
// cluster, and does not prune the other bundles of the repository.
func TestApplyBundleFileToCluster(t *testing.T) {
	env := startManager(t)
	ws := newWorkspace(t, env, "bundle-file")
	ctx := context.Background()
	other := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "r-other", Namespace: ws, Labels: map[string]string{fleet.RepoLabel: "r"}}}
	if err := env.Client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	built, _, err := runFleet(t, corpus(t), "", "apply", "-o", "-", "-n", ws, "r", "simple")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "b.yaml")
	if err := os.WriteFile(file, []byte(built), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := runFleet(t, dir, "", "--kubeconfig", env.Kubeconfig, "-n", ws, "apply", "r", "-b", file,
		"-l", fleet.RepoLabel+"=r", "--bundle-creation-max-concurrency", "2")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "bundle "+ws+"/r-simple created\n") || strings.Contains(out, "deleted") {
		t.Errorf("output %q", out)
	}
	b := &fleet.Bundle{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ws, Name: "r-simple"}, b); err != nil {
		t.Fatal(err)
	}
	if len(b.Spec.Resources) == 0 || b.Labels[fleet.RepoLabel] != "r" {
		t.Errorf("bundle written: labels %v, %d resources", b.Labels, len(b.Spec.Resources))
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(other), &fleet.Bundle{}); err != nil {
		t.Errorf("the other bundle of the repository: %v (pruned?)", err)
	}
}
