package helmop_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/deployer"
	"github.com/fleetgo/fleet/internal/bundlereader"
	"github.com/fleetgo/fleet/internal/helmop"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
	"github.com/fleetgo/fleet/internal/testenv/helmrepo"
)

// renameSpec deploys chart "renamed" 1.0.0 of repo into appNS on the
// clusters labelled env=<env>.
func renameSpec(repoURL, appNS, env string) fleet.BundleSpec {
	return fleet.BundleSpec{
		BundleDeploymentOptions: fleet.BundleDeploymentOptions{
			DefaultNamespace: appNS,
			Helm:             &fleet.HelmOptions{Repo: repoURL, Chart: "renamed", Version: "1.0.0"},
		},
		Targets: []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": env}}}},
	}
}

// TestHelmOpBundleNamedAsHelmOp: the Bundle, and so each
// BundleDeployment, is named exactly as the HelmOp, dots and all, as in
// Rancher Fleet (a fleet.yaml's dependsOn names it so), up to 63
// characters; the default Helm release name is the one Rancher Fleet
// gives it, which an earlier version of this project gave too.
func TestHelmOpBundleNamedAsHelmOp(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "opname")
	repo := helmrepo.New(t, helmrepo.Options{})
	repo.Publish(t, helmrepo.Chart(t, "renamed", "1.0.0"))
	keepCluster(t, ns, "down", map[string]string{"env": "opname"})
	long := strings.Repeat("a", 30) + "." + strings.Repeat("b", 32) // 63
	for _, name := range []string{"my.app", long} {
		op := &fleet.HelmOp{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       fleet.HelmOpSpec{BundleSpec: renameSpec(repo.URL, "app", "opname")},
		}
		if err := env.Client.Create(ctx, op); err != nil {
			t.Fatal(err)
		}
		fleettest.Eventually(t, timeout, func() error {
			b := bundleOf(t, ns, name)
			if b == nil || b.Name != name {
				return fmt.Errorf("bundle %v, want %s", b, name)
			}
			bd, err := keepDeployment(ctx, ns, name)
			if err != nil {
				return err
			}
			if bd.Name != name {
				return fmt.Errorf("bundledeployment %s, want %s", bd.Name, name)
			}
			if c := condition(getOp(t, ns, name), fleet.ConditionAccepted); c == nil || c.Status != metav1.ConditionTrue {
				return fmt.Errorf("accepted = %+v", c)
			}
			return nil
		})
	}
	bd, err := keepDeployment(ctx, ns, "my.app")
	if err != nil {
		t.Fatal(err)
	}
	if got := deployer.ReleaseName(bd.Name, bd.Spec.Options); got != "my-app-deaa787f" {
		t.Fatalf("release name %s, want my-app-deaa787f (Rancher Fleet's for bundle my.app)", got)
	}
	// The BundleDeployment of the Bundle an earlier version named
	// names.HelmReleaseName(name) had the same release name, so an
	// upgrade moves the release instead of installing another.
	for _, name := range []string{"my.app", long} {
		bd, err := keepDeployment(ctx, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		now, before := deployer.ReleaseName(bd.Name, bd.Spec.Options), deployer.ReleaseName(names.HelmReleaseName(name), bd.Spec.Options)
		if now != before {
			t.Fatalf("HelmOp %s: release name %s, was %s", name, now, before)
		}
	}
}

// TestHelmOpNameTooLong: a HelmOp whose name cannot name its Bundle (the
// API server allows 253 characters, a label value 63) is not Accepted,
// says why on its status and in an event, and writes nothing.
func TestHelmOpNameTooLong(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "longname")
	repo := helmrepo.New(t, helmrepo.Options{})
	repo.Publish(t, helmrepo.Chart(t, "renamed", "1.0.0"))
	name := strings.Repeat("a", 30) + "." + strings.Repeat("b", 33) // 64
	op := &fleet.HelmOp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       fleet.HelmOpSpec{BundleSpec: renameSpec(repo.URL, "app", "longname")},
	}
	if err := env.Client.Create(ctx, op); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error {
		got := getOp(t, ns, name)
		for _, typ := range []string{fleet.ConditionAccepted, fleet.ConditionReady} {
			c := condition(got, typ)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != helmop.ReasonInvalidSpec ||
				!strings.Contains(c.Message, "64 characters long, at most 63") || !strings.Contains(c.Message, fleet.BundleLabel) {
				return fmt.Errorf("%s = %+v", typ, c)
			}
		}
		if c := condition(got, fleet.ConditionStalled); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("stalled = %+v", c)
		}
		var evs eventsv1.EventList
		if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == name && e.Reason == "BuildFailed" && strings.Contains(e.Note, "cannot name its Bundle") {
				return nil
			}
		}
		return fmt.Errorf("no BuildFailed event")
	})
	var list fleet.BundleList
	if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Fatalf("bundles written: %d", len(list.Items))
	}
	if n := repo.Requests(); n != 0 {
		t.Fatalf("%d requests to the chart repository for a HelmOp that cannot be deployed", n)
	}
}

// TestHelmOpRenamedBundleKeepsRelease: an earlier version of this project
// named the Bundle of HelmOp "my.app" "my-app-deaa787f". With a real agent
// deploying it (to the manager cluster itself, as Rancher's local
// cluster), the controller now writes Bundle "my.app" and deletes the old
// one only once the new one's BundleDeployment exists (not while the
// Bundle controller rejects the new one): the agent moves the
// release (same name) to the new BundleDeployment and upgrades it to
// revision 2 instead of uninstalling and installing it again, so the app's
// objects are never deleted.
func TestHelmOpRenamedBundleKeepsRelease(t *testing.T) {
	ctx := context.Background()
	r := deployOldNamed(t, "renamed")
	ns, cns, appNS, opName, oldName, spec := r.ns, r.cns, r.appNS, r.opName, r.oldName, r.spec
	if oldName != "my-app-deaa787f" {
		t.Fatalf("the earlier name of bundle %s is %s", opName, oldName)
	}

	// First with a target the Bundle controller rejects: Bundle my.app
	// gets no BundleDeployment, so the old Bundle, and what it deployed,
	// stays.
	bad := *spec.DeepCopy()
	bad.Targets[0].ClusterSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Bogus"}}
	op := &fleet.HelmOp{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: opName}, Spec: fleet.HelmOpSpec{BundleSpec: bad}}
	if err := env.Client.Create(ctx, op); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error {
		got := getOp(t, ns, opName)
		if c := condition(got, fleet.ConditionStalled); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("stalled = %+v", c)
		}
		// The status says which Bundle still deploys, and why.
		return r.keptShown(got, "bundle "+opName+" is rejected")
	})
	fleettest.Consistently(t, 3*time.Second, func() error {
		b := &fleet.Bundle{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: oldName}, b); err != nil || b.DeletionTimestamp != nil {
			return fmt.Errorf("old bundle deleted before the new one took its deployment over: %v", err)
		}
		return nil
	})
	waitRelease(t, cns, oldName, appNS+"/"+oldName+":1")

	patchOp(t, ns, opName, func(o *fleet.HelmOp) { o.Spec.Targets = spec.Targets })
	// The release moved and was upgraded: revision 2 under the new
	// BundleDeployment, not a fresh revision 1.
	r.waitHandedOver(t)
}

// oldNamed is a HelmOp's Bundle as an earlier version of this project
// named it (names.HelmReleaseName of the HelmOp's name), deployed by a
// real agent to cluster "down" (cluster namespace cns): the starting
// point of a rename hand-over.
type oldNamed struct {
	ns, cns, appNS, opName, oldName string
	// spec is the HelmOp's BundleSpec the old Bundle was read from.
	spec fleet.BundleSpec
	// cmUID is the UID of the app's ConfigMap as first installed.
	cmUID types.UID
}

// deployOldNamed writes, for HelmOp "my.app" in a new namespace named
// after prefix, the Bundle an earlier version wrote, and waits until the
// agent has installed its release (revision 1).
func deployOldNamed(t *testing.T, prefix string) oldNamed {
	t.Helper()
	ctx := context.Background()
	ns := newNamespace(t, prefix)
	repo := helmrepo.New(t, helmrepo.Options{})
	repo.Publish(t, helmrepo.Chart(t, "renamed", "1.0.0"))
	keepCluster(t, ns, "down", map[string]string{"env": prefix})
	r := oldNamed{ns: ns, cns: names.ClusterNamespace(ns, "down"), appNS: ns + "-app", opName: "my.app"}
	r.oldName = names.HelmReleaseName(r.opName)
	startAgent(t, r.cns)
	r.spec = renameSpec(repo.URL, r.appNS, prefix)
	old, err := bundlereader.ReadHelmOp(ctx, r.oldName, r.spec.DeepCopy(), bundlereader.Options{
		Namespace: ns, Labels: map[string]string{fleet.HelmOpLabel: r.opName},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	waitRelease(t, r.cns, r.oldName, r.appNS+"/"+r.oldName+":1")
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: r.appNS, Name: "renamed"}, cm); err != nil {
		t.Fatal(err)
	}
	r.cmUID = cm.UID
	return r
}

// waitHandedOver waits until the hand-over is complete: the release moved
// to BundleDeployment opName and upgraded (revision 2, not a fresh
// install), only Bundle opName left, the old BundleDeployment gone, the
// HelmOp Ready, and the app's ConfigMap the very object first installed.
// The old BundleDeployment's clean-up must have left the release alone.
func (r oldNamed) waitHandedOver(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	waitRelease(t, r.cns, r.opName, r.appNS+"/"+r.oldName+":2")
	fleettest.Eventually(t, timeout, func() error {
		var list fleet.BundleList
		if err := env.Client.List(ctx, &list, client.InNamespace(r.ns), client.MatchingLabels{fleet.HelmOpLabel: r.opName}); err != nil {
			return err
		}
		if len(list.Items) != 1 || list.Items[0].Name != r.opName {
			return fmt.Errorf("%d bundles, want only %s", len(list.Items), r.opName)
		}
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: r.cns, Name: r.oldName}, &fleet.BundleDeployment{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("old bundledeployment: %v", err)
		}
		got := getOp(t, r.ns, r.opName)
		if c := condition(got, fleet.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("helmop ready = %+v", c)
		}
		// The old Bundle is gone, and so is its mention.
		if strings.Contains(got.Status.Display.Message, r.oldName) || strings.Contains(condition(got, fleet.ConditionReady).Message, r.oldName) {
			return fmt.Errorf("helmop status still names bundle %s: %+v", r.oldName, got.Status.Display)
		}
		return nil
	})
	after := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: r.appNS, Name: "renamed"}, after); err != nil {
		t.Fatal(err)
	}
	if after.UID != r.cmUID {
		t.Fatalf("the app's ConfigMap was deleted and created again (uid %s, was %s)", after.UID, r.cmUID)
	}
	waitRelease(t, r.cns, r.opName, r.appNS+"/"+r.oldName+":2")
}

// keptShown checks that op's Ready message and display message name the
// old Bundle as kept, and why.
func (r oldNamed) keptShown(op *fleet.HelmOp, why string) error {
	want := "bundle " + r.oldName + " of an older name is kept until its deployments are taken over: " + why
	c := condition(op, fleet.ConditionReady)
	if c == nil || !strings.Contains(c.Message, want) || !strings.Contains(op.Status.Display.Message, want) {
		return fmt.Errorf("helmop ready = %+v, display %+v; want a message with %q", c, op.Status.Display, want)
	}
	return nil
}

// waitRelease waits until BundleDeployment name in cns is deployed and
// ready with release (namespace/name:revision).
func waitRelease(t *testing.T, cns, name, release string) {
	t.Helper()
	fleettest.Eventually(t, timeout, func() error {
		bd := &fleet.BundleDeployment{}
		if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: cns, Name: name}, bd); err != nil {
			return err
		}
		if bd.Status.AppliedDeploymentID != bd.Spec.DeploymentID || !bd.Status.Ready || bd.Status.Release != release {
			return fmt.Errorf("bundledeployment %s: applied %q of %q, ready %v, release %q, want %q; conditions %+v",
				name, bd.Status.AppliedDeploymentID, bd.Spec.DeploymentID, bd.Status.Ready, bd.Status.Release, release, bd.Status.Conditions)
		}
		return nil
	})
}

// TestHelmOpBundleNameTakenByGitRepo: now that the Bundle is named as the
// HelmOp, a GitRepo's Bundle can already have that name (a fleet.yaml
// name:). The HelmOp then is not Accepted and says so; the GitRepo's
// Bundle is left as it is.
func TestHelmOpBundleNameTakenByGitRepo(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "taken")
	repo := helmrepo.New(t, helmrepo.Options{})
	repo.Publish(t, helmrepo.Chart(t, "renamed", "1.0.0"))
	foreign := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "my.app", Labels: map[string]string{fleet.RepoLabel: "apps"}},
		Spec: fleet.BundleSpec{
			Resources: []fleet.BundleResource{{Name: "cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: apps\n"}},
			Targets:   []fleet.BundleTarget{{Name: "none", ClusterName: "nowhere"}},
		},
	}
	if err := env.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	op := &fleet.HelmOp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "my.app"},
		Spec:       fleet.HelmOpSpec{BundleSpec: renameSpec(repo.URL, "app", "taken")},
	}
	if err := env.Client.Create(ctx, op); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error {
		c := condition(getOp(t, ns, "my.app"), fleet.ConditionAccepted)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != helmop.ReasonInvalidSpec || !strings.Contains(c.Message, "belongs to") {
			return fmt.Errorf("accepted = %+v", c)
		}
		return nil
	})
	got := &fleet.Bundle{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(foreign), got); err != nil {
		t.Fatal(err)
	}
	if got.Labels[fleet.HelmOpLabel] != "" || len(got.Spec.Resources) != 1 || got.Spec.Resources[0].Name != "cm.yaml" {
		t.Fatalf("the GitRepo's bundle was changed: labels %v, %d resources", got.Labels, len(got.Spec.Resources))
	}
}
