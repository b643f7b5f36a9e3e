package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestApplyFleetYAMLNameOnAPIServer: `fleet apply` names a Bundle with
// fleet.yaml's name as written, as Rancher Fleet does, so the same
// fleet.yaml gives the same Bundle; a name that Rancher Fleet would pass on
// to be refused by the API server, or that would make a Bundle whose
// BundleDeployments the API server refuses (their bundle-name label),
// fails the command naming the file and the rule, and the repository's
// Bundles are left as they were (none pruned, none written).
func TestApplyFleetYAMLNameOnAPIServer(t *testing.T) {
	env := startManager(t)
	ws := newWorkspace(t, env, "fleet-yaml-name")
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "app"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "app", "cm.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	setName := func(name string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "app", "fleet.yaml"), []byte("name: \""+name+"\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	applyRepo := func() (string, error) {
		out, _, err := runFleet(t, dir, "", "--kubeconfig", env.Kubeconfig, "-n", ws, "apply", "r", "app", "-l", fleet.RepoLabel+"=r")
		return out, err
	}
	// bdAccepted reports whether the API server takes a BundleDeployment
	// of a Bundle of that name, as the manager labels it.
	bdAccepted := func(name string) bool {
		t.Helper()
		bd := &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{GenerateName: "bd-", Namespace: ws,
			Labels: map[string]string{fleet.BundleLabel: name, fleet.BundleNamespaceLabel: ws}}}
		err := env.Client.Create(ctx, bd)
		if err != nil && !apierrors.IsInvalid(err) {
			t.Fatal(err)
		}
		if err == nil {
			_ = env.Client.Delete(ctx, bd)
		}
		return err == nil
	}
	// bundleAccepted reports whether the API server takes a Bundle of that
	// name, which is what Rancher Fleet would try to create.
	bundleAccepted := func(name string) bool {
		t.Helper()
		b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
		err := env.Client.Create(ctx, b)
		if err != nil && !apierrors.IsInvalid(err) {
			t.Fatal(err)
		}
		if err == nil {
			_ = env.Client.Delete(ctx, b)
		}
		return err == nil
	}

	// Valid names, dotted and up to 63 characters, are kept as written.
	name63 := strings.Repeat("a", 30) + "." + strings.Repeat("b", 32)
	for _, name := range []string{"my.app.v2", name63} {
		setName(name)
		if out, err := applyRepo(); err != nil {
			t.Fatalf("apply with name %q: %v\n%s", name, err, out)
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ws, Name: name}, &fleet.Bundle{}); err != nil {
			t.Fatalf("bundle %q: %v", name, err)
		}
		if !bdAccepted(name) {
			t.Errorf("name %q: the API server refuses its BundleDeployments", name)
		}
	}

	// Invalid names: the command fails before writing, and the verbatim
	// name would indeed have been refused by the API server.
	for _, name := range []string{"My-App", "my_app", name63 + "c", strings.Repeat("a", 253)} {
		setName(name)
		out, err := applyRepo()
		if err == nil || !strings.Contains(err.Error(), "app/fleet.yaml: name \""+name+"\" is not a valid Bundle name") {
			t.Errorf("name %q: err = %v", name, err)
		}
		if strings.Contains(out, "created") || strings.Contains(out, "deleted") {
			t.Errorf("name %q: output %q", name, out)
		}
		if bundleAccepted(name) && bdAccepted(name) {
			t.Errorf("name %q was refused, but the API server takes it for a Bundle and its BundleDeployments", name)
		}
		var list fleet.BundleList
		if err := env.Client.List(ctx, &list, client.InNamespace(ws)); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 || list.Items[0].Name != name63 {
			t.Errorf("name %q: bundles of the workspace changed: %d, want only %s", name, len(list.Items), name63)
		}
	}
}
