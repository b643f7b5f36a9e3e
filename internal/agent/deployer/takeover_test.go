package deployer

import (
	"context"
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
)

// TestTakeOverRelease: ReleaseOwner names the BundleDeployment a release
// belongs to (none for its own), a deploy refuses another's release unless
// it takes over from exactly that owner, and a takeover upgrades the
// release in place (the ConfigMap keeps its UID) and records the new
// owner, after which the old owner's uninstall leaves it alone.
func TestTakeOverRelease(t *testing.T) {
	ctx := context.Background()
	down := downstream(t)
	d := newTestDeployer(t)
	const ns = "takeover-owner"
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns, Helm: &fleet.HelmOptions{ReleaseName: "moving"}}
	files := func(v string) map[string]string {
		return map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: moving\ndata:\n  x: " + v + "\n"}
	}
	owner := func(bd string) string {
		t.Helper()
		o, err := d.ReleaseOwner(ctx, bd, opts)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	if o := owner("old-bd"); o != "" {
		t.Fatalf("owner of a release not deployed: %q", o)
	}
	if _, err := deployFiles(t, d, "old-bd", files("old"), opts); err != nil {
		t.Fatalf("deploy old-bd: %v", err)
	}
	if o := owner("old-bd"); o != "" {
		t.Fatalf("old-bd's own release has owner %q for it", o)
	}
	if o := owner("new-bd"); o != "old-bd" {
		t.Fatalf("owner for new-bd %q, want old-bd", o)
	}
	before, err := down.Clientset.CoreV1().ConfigMaps(ns).Get(ctx, "moving", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	deploy := func(takeOver string) error {
		m := mf(t, files("new"))
		id, err := m.ID()
		if err != nil {
			t.Fatal(err)
		}
		_, err = d.Deploy(ctx, Input{Name: "new-bd", DeploymentID: id, Options: opts, Manifest: m, TakeOver: takeOver})
		return err
	}
	var owned *ReleaseOwnedError
	if err := deploy("someone-else"); !errors.As(err, &owned) || owned.Owner != "old-bd" {
		t.Fatalf("takeover from another than the owner: err = %v, want a ReleaseOwnedError of old-bd", err)
	}
	if err := deploy("old-bd"); err != nil {
		t.Fatalf("takeover from old-bd: %v", err)
	}
	after, err := down.Clientset.CoreV1().ConfigMaps(ns).Get(ctx, "moving", metav1.GetOptions{})
	if err != nil || after.UID != before.UID || after.Data["x"] != "new" {
		t.Fatalf("ConfigMap after the takeover: %v (err %v), want uid %s and x=new", after.Data, err, before.UID)
	}
	if o := owner("old-bd"); o != "new-bd" {
		t.Fatalf("owner for old-bd after the takeover %q, want new-bd", o)
	}
	if err := d.Uninstall(ctx, UninstallInput{ReleaseName: "moving", Namespace: ns, BundleDeployment: "old-bd"}); err != nil {
		t.Fatalf("uninstall for old-bd: %v", err)
	}
	if _, err := down.Clientset.CoreV1().ConfigMaps(ns).Get(ctx, "moving", metav1.GetOptions{}); err != nil {
		t.Fatalf("old-bd's uninstall removed the taken-over release: %v", err)
	}
}

// IsOwnerName takes a storage label cut from a long name for that name.
func TestIsOwnerName(t *testing.T) {
	long := "a-bundledeployment-name-longer-than-a-label-value-may-be-0123456789"
	for _, c := range []struct {
		owner, bd string
		want      bool
	}{
		{owner: "a", bd: "a", want: true},
		{owner: "a", bd: "b", want: false},
		{owner: "", bd: "", want: false},
		{owner: long, bd: long, want: true},
		{owner: names.Limit(long, maxLabelValue), bd: long, want: true},
		{owner: long[:40], bd: long, want: false},
	} {
		if got := IsOwnerName(c.owner, c.bd); got != c.want {
			t.Errorf("IsOwnerName(%q, %q) = %v, want %v", c.owner, c.bd, got, c.want)
		}
	}
}
