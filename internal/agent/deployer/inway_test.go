package deployer

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// Someone stores a Secret, without Helm's labels, under the name the
// agent's next revision of a release will have. Helm never sees it (it
// is not the agent's), so its upgrade tries to create that revision: the
// deploy must not fail with "already exists" on every attempt; the
// Secret in the way is removed (it was never the agent's) and the new,
// signed revision stored.
func TestForeignSecretUnderNextRevisionName(t *testing.T) {
	ctx := context.Background()
	d := newTestDeployer(t)
	const ns = "inway"
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns}
	if _, err := deployFiles(t, d, "app", cmFile("app", "v1"), opts); err != nil {
		t.Fatal(err)
	}
	const next = "sh.helm.release.v1.app.v2"
	if _, err := d.core.Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: next, Namespace: ns},
		Data: map[string][]byte{"release": []byte("not a release")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rel, err := deployFiles(t, d, "app", cmFile("app", "v2"), opts)
	if err != nil {
		t.Fatalf("deploy with a foreign Secret under the next revision's name: %v", err)
	}
	if rel.Version != 2 {
		t.Fatalf("deployed revision %d, want 2", rel.Version)
	}
	cm, err := d.core.ConfigMaps(ns).Get(ctx, "app", metav1.GetOptions{})
	if err != nil || cm.Data["k"] != "v2" {
		t.Fatalf("configmap after the upgrade: %v %v", cm.Data, err)
	}
	sec, err := d.core.Secrets(ns).Get(ctx, next, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sec.Labels[SignatureLabel] == "" || sec.Labels["name"] != "app" {
		t.Fatalf("%s is not the agent's signed revision: labels %v", next, sec.Labels)
	}
	cur, err := d.Current(context.Background(), "app", opts)
	if err != nil || cur == nil || cur.Version != 2 {
		t.Fatalf("current release %+v (%v), want revision 2", cur, err)
	}
}
