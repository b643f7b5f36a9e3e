package deployer

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestReleaseOwnedByAnotherBundleDeployment: two BundleDeployments setting
// the same helm.releaseName in the same namespace. The second is refused
// with a bad-input error naming the release, its namespace and the owner,
// and nothing of the first's release changes: its ConfigMap stays, its
// history gets no revision, the second's ConfigMap is never created. The
// refusal holds after a restart (a new Deployer reading storage), while
// the owner still upgrades; and removing the refused bundle (its clean-up
// finds no release of its own; an uninstall for it leaves the release)
// does not uninstall the owner's.
func TestReleaseOwnedByAnotherBundleDeployment(t *testing.T) {
	ctx := context.Background()
	down := downstream(t)
	d := newTestDeployer(t)
	const ns = "collide-owner"
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns, Helm: &fleet.HelmOptions{ReleaseName: "shared"}}
	cm := func(name, v string) map[string]string {
		return map[string]string{name + ".yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata:\n  x: " + v + "\n"}
	}
	if _, err := deployFiles(t, d, "bundle-a", cm("from-a", "a"), opts); err != nil {
		t.Fatalf("deploy bundle-a: %v", err)
	}

	refused := func(d *Deployer) {
		t.Helper()
		rel, err := deployFiles(t, d, "bundle-b", cm("from-b", "b"), opts)
		if err == nil {
			t.Fatalf("bundle-b deployed %s over bundle-a's release", rel)
		}
		const want = "release shared in namespace collide-owner belongs to BundleDeployment bundle-a: two bundles cannot share a releaseName"
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q, want it to contain %q", err, want)
		}
		var owned *ReleaseOwnedError
		if !errors.As(err, &owned) || owned.Owner != "bundle-a" || !IsRenderError(err) {
			t.Fatalf("error %v (%T) is not a ReleaseOwnedError of bundle-a that is bad input", err, err)
		}
		if _, err := down.Clientset.CoreV1().ConfigMaps(ns).Get(ctx, "from-b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("bundle-b's ConfigMap: err = %v, want NotFound", err)
		}
	}
	aIntact := func(wantRevisions int) {
		t.Helper()
		got, err := down.Clientset.CoreV1().ConfigMaps(ns).Get(ctx, "from-a", metav1.GetOptions{})
		if err != nil || got.Data["x"] != "a" {
			t.Fatalf("bundle-a's ConfigMap: %v (err %v), want x=a", got.Data, err)
		}
		list, err := down.Clientset.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=shared"})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != wantRevisions {
			t.Fatalf("%d stored revisions of release shared, want %d", len(list.Items), wantRevisions)
		}
		for _, s := range list.Items {
			if s.Labels[StorageBundleIDLabel] != "bundle-a" {
				t.Fatalf("revision %s is labelled for %q, want bundle-a", s.Name, s.Labels[StorageBundleIDLabel])
			}
		}
	}

	refused(d)
	aIntact(1)

	// After a restart nothing in memory decides: still a's.
	restarted := newTestDeployer(t)
	refused(restarted)
	aIntact(1)
	if _, err := deployFiles(t, restarted, "bundle-a", cm("from-a", "a"), opts); err != nil {
		t.Fatalf("bundle-a's own upgrade: %v", err)
	}
	refused(restarted)
	aIntact(2)

	// Removing bundle-b: the clean-up looks for releases recorded for it
	// and finds none; an uninstall made for it leaves a's release.
	refs, err := restarted.Releases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range refs {
		if r.Namespace == ns && r.BundleDeployment != "bundle-a" {
			t.Fatalf("release %s/%s is listed for %q, want bundle-a", r.Namespace, r.Name, r.BundleDeployment)
		}
	}
	if err := restarted.Uninstall(ctx, UninstallInput{ReleaseName: "shared", Namespace: ns, BundleDeployment: "bundle-b", DeleteNamespace: true}); err != nil {
		t.Fatalf("uninstall for bundle-b: %v", err)
	}
	aIntact(2)
}
