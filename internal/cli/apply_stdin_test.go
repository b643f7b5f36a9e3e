package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// setStdinLimits lowers the limits of -f - and -b - for one test.
func setStdinLimits(t *testing.T, fleetYAML, bundleFile int64) {
	t.Helper()
	oldF, oldB := maxFleetYAMLStdin, maxBundleFileStdin
	maxFleetYAMLStdin, maxBundleFileStdin = fleetYAML, bundleFile
	t.Cleanup(func() { maxFleetYAMLStdin, maxBundleFileStdin = oldF, oldB })
}

// twoResourceBundle is a Bundle of two resources, and the offset of the
// second one: cut there, the stream is still a valid Bundle, of one
// resource.
func twoResourceBundle(name string) (string, int) {
	doc := "apiVersion: fleet.cattle.io/v1alpha1\nkind: Bundle\nmetadata:\n  name: " + name + "\nspec:\n  resources:\n" +
		"  - name: a.yaml\n    content: |\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: a}\n"
	second := "  - name: b.yaml\n    content: |\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: b}\n"
	return doc + second, len(doc)
}

// TestApplyBundleFileStdinTooLarge: -b - reading more than its limit from
// stdin fails naming the limit and writes nothing, rather than writing the
// Bundles of the part read, whose last one may be cut short: here the
// deployed Bundle keeps both of its resources.
func TestApplyBundleFileStdinTooLarge(t *testing.T) {
	env := startManager(t)
	ws := newWorkspace(t, env, "stdin-limit")
	full, cut := twoResourceBundle("r-two")
	dir := t.TempDir()
	args := []string{"--kubeconfig", env.Kubeconfig, "-n", ws, "apply", "r", "-b", "-"}
	if out, _, err := runFleet(t, dir, full, args...); err != nil || !strings.Contains(out, "r-two created") {
		t.Fatalf("first apply: %v (%q)", err, out)
	}

	setStdinLimits(t, 1<<20, int64(cut))
	out, _, err := runFleet(t, dir, full, args...)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("stdin is larger than %d bytes", cut)) {
		t.Fatalf("err = %v, want stdin named too large", err)
	}
	if out != "" {
		t.Errorf("printed %q despite the error", out)
	}
	b := &fleet.Bundle{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ws, Name: "r-two"}, b); err != nil {
		t.Fatal(err)
	}
	if len(b.Spec.Resources) != 2 {
		t.Errorf("the deployed Bundle has %d resources, want its 2 kept", len(b.Spec.Resources))
	}

	// Exactly at the limit is read whole.
	setStdinLimits(t, 1<<20, int64(len(full)))
	if _, _, err := runFleet(t, dir, full, args...); err != nil {
		t.Errorf("stdin of exactly the limit: %v", err)
	}
}

// TestApplyFleetYAMLStdinTooLarge: -f - fails on a fleet.yaml larger than
// its limit, naming it in MiB, instead of reading the part before it (here
// a valid fleet.yaml without its labels, which come after a long comment).
func TestApplyFleetYAMLStdinTooLarge(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cm.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	setStdinLimits(t, 1<<20, 64<<20)
	head := "namespace: x\n"
	fleetYAML := head + "# " + strings.Repeat("a", 1<<20) + "\nlabels:\n  team: blue\n"
	out, _, err := runFleet(t, dir, fleetYAML, "apply", "-o", "-", "-f", "-", "r", ".")
	if err == nil || !strings.Contains(err.Error(), "stdin is larger than 1 MiB") {
		t.Fatalf("err = %v, want stdin named larger than 1 MiB", err)
	}
	if out != "" {
		t.Errorf("printed bundles despite the error:\n%.300s", out)
	}

	setStdinLimits(t, int64(len(head)), 64<<20)
	if _, _, err := runFleet(t, dir, head, "apply", "-o", "-", "-f", "-", "r", "."); err != nil {
		t.Errorf("fleet.yaml of exactly the limit: %v", err)
	}
}

// TestApplyRefusesNegativeMaxBundleSize: a negative --max-bundle-size is
// refused like the other negative limits, not taken as the default.
func TestApplyRefusesNegativeMaxBundleSize(t *testing.T) {
	out, _, err := runFleet(t, corpus(t), "", "apply", "-o", "-", "r", "simple", "--max-bundle-size", "-5")
	if err == nil || !strings.Contains(err.Error(), "--max-bundle-size must not be negative, got -5") {
		t.Fatalf("err = %v, want the negative size refused", err)
	}
	if out != "" {
		t.Errorf("printed bundles despite the error:\n%s", out)
	}
	if _, _, err := runFleet(t, corpus(t), "", "apply", "-o", "-", "r", "simple", "--max-bundle-size", "0"); err != nil {
		t.Errorf("--max-bundle-size 0 (the default): %v", err)
	}
}

// TestSizeString: the limits are named in MiB when they are whole MiB.
func TestSizeString(t *testing.T) {
	for n, want := range map[int64]string{64 << 20: "64 MiB", 10 << 20: "10 MiB", 1000: "1000 bytes", 3<<20 + 1: "3145729 bytes"} {
		if got := sizeString(n); got != want {
			t.Errorf("sizeString(%d) = %q, want %q", n, got, want)
		}
	}
}
