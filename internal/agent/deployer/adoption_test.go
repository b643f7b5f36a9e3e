package deployer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
)

func TestAdoption(t *testing.T) {
	target := releaseID{namespace: "ns", name: "two"}
	const bd = "mine"
	helm := map[string]string{managedByLabel: "Helm"}
	owned := func(ns, name string) map[string]string {
		return map[string]string{releaseNSAnnotation: ns, releaseNameAnnotation: name}
	}
	copyOf := func(bd string) map[string]string { return map[string]string{fleet.BundleDeploymentLabel: bd} }
	long := strings.Repeat("b", 80)
	for _, c := range []struct {
		name   string
		f      adoptFacts
		bdName string
		want   adoptVerdict
		reason string
	}{
		{name: "this release's", f: adoptFacts{labels: helm, annotations: owned("ns", "two")}, want: ownedAlready},
		{name: "this release's without the label", f: adoptFacts{annotations: owned("ns", "two")}, want: adoptObject},
		{name: "nobody's at upgrade", f: adoptFacts{upgrade: true}, want: adoptObject},
		{name: "nobody's but labelled at upgrade", f: adoptFacts{labels: helm, upgrade: true}, want: adoptObject},
		{name: "nobody's at install", f: adoptFacts{}, want: refuseObject, reason: "a first install adopts such an object only with helm.takeOwnership"},
		{name: "own earlier release's at install", f: adoptFacts{labels: helm, annotations: owned("ns", "one"), ownEarlier: true}, want: adoptObject},
		{name: "own earlier release's at upgrade", f: adoptFacts{labels: helm, annotations: owned("old-ns", "two"), upgrade: true, ownEarlier: true}, want: adoptObject},
		{name: "own earlier release's cluster-scoped", f: adoptFacts{labels: helm, annotations: owned("ns", "one"), clusterScoped: true, upgrade: true, ownEarlier: true}, want: adoptObject},
		{name: "another release's at install", f: adoptFacts{labels: helm, annotations: owned("ns", "one")}, want: refuseObject, reason: "it belongs to Helm release ns/one; set helm.takeOwnership"},
		{name: "another release's at upgrade", f: adoptFacts{labels: helm, annotations: owned("ns", "one"), upgrade: true}, want: refuseObject, reason: "it belongs to Helm release ns/one"},
		{name: "same name in another namespace", f: adoptFacts{labels: helm, annotations: owned("other", "two"), upgrade: true}, want: refuseObject, reason: "it belongs to Helm release other/two"},
		// Uninstalling the release would delete it, and everything in it.
		{name: "nobody's namespace at upgrade", f: adoptFacts{clusterScoped: true, upgrade: true}, want: refuseObject, reason: "is cluster-scoped"},
		{name: "nobody's cluster-scoped, labelled, at upgrade", f: adoptFacts{labels: helm, clusterScoped: true, upgrade: true}, want: refuseObject, reason: "set helm.takeOwnership to adopt it"},
		{name: "this release's cluster-scoped without the label", f: adoptFacts{annotations: owned("ns", "two"), clusterScoped: true, upgrade: true}, want: adoptObject},
		// Another BundleDeployment's downstreamResources copy.
		{name: "another deployment's copy at upgrade", f: adoptFacts{labels: copyOf("theirs"), upgrade: true}, want: refuseObject,
			reason: "it is labelled fleet.cattle.io/bundledeployment=theirs, a copy made for another BundleDeployment (downstreamResources); set helm.takeOwnership"},
		// An object of this deployment's earlier release (helm.releaseName
		// renamed) is its own, whatever was added to it since.
		{name: "own earlier release's labelled for another deployment", f: adoptFacts{labels: map[string]string{managedByLabel: "Helm", fleet.BundleDeploymentLabel: "theirs"}, annotations: owned("ns", "one"), upgrade: true, ownEarlier: true}, want: adoptObject},
		{name: "own earlier release's labelled for another deployment, at install", f: adoptFacts{labels: copyOf("theirs"), annotations: owned("ns", "one"), ownEarlier: true}, want: adoptObject},
		{name: "another release's labelled for another deployment", f: adoptFacts{labels: copyOf("theirs"), annotations: owned("ns", "one"), upgrade: true}, want: refuseObject, reason: "theirs"},
		{name: "own copy at upgrade", f: adoptFacts{labels: copyOf(bd), upgrade: true}, want: adoptObject},
		{name: "own copy, long name cut in the label", bdName: long, f: adoptFacts{labels: copyOf(names.Limit(long, maxLabelValue)), upgrade: true}, want: adoptObject},
		{name: "this release's copy of another deployment", f: adoptFacts{labels: map[string]string{managedByLabel: "Helm", fleet.BundleDeploymentLabel: "theirs"}, annotations: owned("ns", "two")}, want: ownedAlready},
		// Owned by a controller.
		{name: "controlled at upgrade", f: adoptFacts{controller: "Certificate web", upgrade: true}, want: refuseObject,
			reason: "it is controlled by Certificate web (a controller ownerReference); set helm.takeOwnership"},
		{name: "controlled, of own earlier release", f: adoptFacts{controller: "Certificate web", labels: helm, annotations: owned("ns", "one"), ownEarlier: true}, want: adoptObject},
		{name: "controlled, of own earlier release, cluster-scoped, labelled for another deployment", f: adoptFacts{controller: "Certificate web", labels: map[string]string{managedByLabel: "Helm", fleet.BundleDeploymentLabel: "theirs"}, annotations: owned("old-ns", "two"), clusterScoped: true, upgrade: true, ownEarlier: true}, want: adoptObject},
		{name: "controlled, of another release", f: adoptFacts{controller: "Certificate web", labels: helm, annotations: owned("ns", "one"), upgrade: true}, want: refuseObject, reason: "Certificate web"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bdName := c.bdName
			if bdName == "" {
				bdName = bd
			}
			got, reason := adoption(c.f, target, bdName)
			if got != c.want || !strings.Contains(reason, c.reason) || (got == refuseObject) != (reason != "") {
				t.Fatalf("adoption = %v %q, want %v with a reason containing %q", got, reason, c.want, c.reason)
			}
		})
	}
}

func cmYAML(name, v string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata:\n  x: \"" + v + "\"\n"
}

// An upgrade adopts namespaced objects that carry no Helm ownership at
// all — a ConfigMap made by hand — keeping them (same UID) and marking
// them the release's; an object another release owns is still refused,
// left as it was, with nothing adopted in that attempt. (A Namespace:
// TestUpgradeRefusesObjectsOthersKeep.)
func TestUpgradeAdoptsUnownedObjects(t *testing.T) {
	ctx := context.Background()
	down := downstream(t)
	d := newTestDeployer(t)
	const ns = "upgrade-adopt"
	core := down.Clientset.CoreV1()
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns}
	files := map[string]string{"a.yaml": cmYAML("a", "1")}
	if _, err := deployFiles(t, d, "adopter", files, opts); err != nil {
		t.Fatalf("install: %v", err)
	}
	byHand, err := core.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "by-hand"}, Data: map[string]string{"x": "hand"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "by-hand-2"}, Data: map[string]string{"x": "hand"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := deployFiles(t, d, "other", map[string]string{"theirs.yaml": cmYAML("theirs", "other")}, opts); err != nil {
		t.Fatalf("install other: %v", err)
	}

	// Objects of no release: adopted.
	adopted := map[string]string{
		"a.yaml": cmYAML("a", "1"), "hand.yaml": cmYAML("by-hand", "bundle"),
	}
	if _, err := deployFiles(t, d, "adopter", adopted, opts); err != nil {
		t.Fatalf("upgrade adding objects of no release: %v", err)
	}
	hand, err := core.ConfigMaps(ns).Get(ctx, "by-hand", metav1.GetOptions{})
	if err != nil || hand.UID != byHand.UID || hand.Data["x"] != "bundle" ||
		hand.Labels[managedByLabel] != "Helm" || hand.Annotations[releaseNameAnnotation] != "adopter" {
		t.Fatalf("by-hand: uid %s data %v labels %v annotations %v (err %v); want uid %s, x=bundle, owned by adopter",
			hand.UID, hand.Data, hand.Labels, hand.Annotations, err, byHand.UID)
	}
	// Another release's object in the upgrade: refused, and the unowned
	// one beside it is not adopted either.
	refused := map[string]string{
		"a.yaml": cmYAML("a", "1"), "hand.yaml": cmYAML("by-hand", "bundle"),
		"hand2.yaml": cmYAML("by-hand-2", "bundle"), "theirs.yaml": cmYAML("theirs", "adopter"),
	}
	_, err = deployFiles(t, d, "adopter", refused, opts)
	const want = "ConfigMap upgrade-adopt/theirs exists and cannot be imported into the current release: it belongs to Helm release upgrade-adopt/other"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("upgrade adding another release's object: err = %v, want it to contain %q", err, want)
	}
	theirs, err := core.ConfigMaps(ns).Get(ctx, "theirs", metav1.GetOptions{})
	if err != nil || theirs.Data["x"] != "other" || theirs.Annotations[releaseNameAnnotation] != "other" {
		t.Fatalf("other's ConfigMap after the refused upgrade: %v %v (err %v)", theirs.Data, theirs.Annotations, err)
	}
	hand2, err := core.ConfigMaps(ns).Get(ctx, "by-hand-2", metav1.GetOptions{})
	if err != nil || hand2.Data["x"] != "hand" || hand2.Annotations[releaseNameAnnotation] != "" {
		t.Fatalf("by-hand-2 after the refused upgrade: %v %v (err %v), want untouched", hand2.Data, hand2.Annotations, err)
	}
}

// Renaming a BundleDeployment's release (helm.releaseName one → two) with
// objects of fixed names: the new release adopts the objects of the old
// one, which records the same BundleDeployment (same UIDs), also one
// given a controller ownerReference and another BundleDeployment's label
// since, and the old release's uninstall then leaves them. An object of another
// BundleDeployment's release is still refused.
func TestRenamedReleaseAdoptsOwnObjects(t *testing.T) {
	ctx := context.Background()
	down := downstream(t)
	d := newTestDeployer(t)
	const ns = "rename-adopt"
	core := down.Clientset.CoreV1()
	opts := func(release string) fleet.BundleDeploymentOptions {
		return fleet.BundleDeploymentOptions{DefaultNamespace: ns, Helm: &fleet.HelmOptions{ReleaseName: release}}
	}
	crd := rancherCRDIn("rename.example.net", "widgets", "Widget")
	files := map[string]string{"cm.yaml": cmYAML("fixed", "1"), "gone.yaml": cmYAML("only-in-one", "1"), "crd.yaml": crd}
	if _, err := deployFiles(t, d, "renamer", files, opts("one")); err != nil {
		t.Fatalf("deploy as one: %v", err)
	}
	before, err := core.ConfigMaps(ns).Get(ctx, "fixed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Still this BundleDeployment's after someone added a controller
	// ownerReference and another BundleDeployment's label.
	before.Labels[fleet.BundleDeploymentLabel] = "theirs"
	controller := true
	before.OwnerReferences = []metav1.OwnerReference{{APIVersion: "cert-manager.io/v1", Kind: "Certificate", Name: "web", UID: "0000-web", Controller: &controller}}
	if before, err = core.ConfigMaps(ns).Update(ctx, before, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(down.Config)
	if err != nil {
		t.Fatal(err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	crdBefore, err := crds.Get(ctx, "widgets.rename.example.net", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	files = map[string]string{"cm.yaml": cmYAML("fixed", "2"), "crd.yaml": crd}
	if _, err := deployFiles(t, d, "renamer", files, opts("two")); err != nil {
		t.Fatalf("deploy as two: %v", err)
	}
	crdAfter, err := crds.Get(ctx, "widgets.rename.example.net", metav1.GetOptions{})
	if err != nil || crdAfter.GetUID() != crdBefore.GetUID() || crdAfter.GetAnnotations()[releaseNameAnnotation] != "two" {
		t.Fatalf("CRD after the rename: %v (err %v), want uid %s owned by two", crdAfter, err, crdBefore.GetUID())
	}
	wantFixed := func(when string) {
		t.Helper()
		cm, err := core.ConfigMaps(ns).Get(ctx, "fixed", metav1.GetOptions{})
		if err != nil || cm.UID != before.UID || cm.Data["x"] != "2" || cm.Annotations[releaseNameAnnotation] != "two" {
			t.Fatalf("%s: fixed uid %s data %v annotations %v (err %v); want uid %s, x=2, owned by two",
				when, cm.UID, cm.Data, cm.Annotations, err, before.UID)
		}
	}
	wantFixed("after the rename")

	// Another BundleDeployment's release: refused (here for the label
	// first), the object untouched.
	_, err = deployFiles(t, d, "stranger", map[string]string{"cm.yaml": cmYAML("fixed", "s")}, opts("three"))
	const want = "ConfigMap rename-adopt/fixed exists and cannot be imported into the current release: it is labelled fleet.cattle.io/bundledeployment=theirs"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("stranger's install: err = %v, want it to contain %q", err, want)
	}
	wantFixed("after stranger's refused install")
	if err := d.Uninstall(ctx, UninstallInput{ReleaseName: "one", Namespace: ns, BundleDeployment: "renamer"}); err != nil {
		t.Fatalf("uninstall one: %v", err)
	}
	wantFixed("after one's uninstall")
	if _, err := core.ConfigMaps(ns).Get(ctx, "only-in-one", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("one's own object after its uninstall: err = %v, want NotFound", err)
	}
	list, err := core.Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=one"})
	if err != nil || len(list.Items) != 0 {
		t.Fatalf("release one still stored: %d (err %v)", len(list.Items), err)
	}
}

// raceRuns numbers the runs of TestConcurrentDeploysOfOneRelease in this
// process (-count), each in namespaces of its own.
var raceRuns atomic.Int32

// Two BundleDeployments naming one release, deployed at the same moment:
// exactly one deploys, the other is refused as the release's owner's,
// and nothing of the loser's is applied.
func TestConcurrentDeploysOfOneRelease(t *testing.T) {
	ctx := context.Background()
	down := downstream(t)
	d := newTestDeployer(t)
	core := down.Clientset.CoreV1()
	run := raceRuns.Add(1)
	for round := range 5 {
		ns := fmt.Sprintf("race-%d-%d", run, round)
		opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns, Helm: &fleet.HelmOptions{ReleaseName: "raced"}}
		bds := []string{"racer-a", "racer-b"}
		errs := make([]error, len(bds))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, bd := range bds {
			files := map[string]string{"shared.yaml": cmYAML("shared", bd), "own.yaml": cmYAML("only-"+bd, bd)}
			m := mf(t, files)
			id, err := m.ID()
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = d.Deploy(ctx, Input{Name: bd, DeploymentID: id, Options: opts, Manifest: m})
			}()
		}
		close(start)
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("round %d: errors %v and %v, want exactly one deploy to fail", round, errs[0], errs[1])
		}
		winner, loser, lerr := bds[0], bds[1], errs[1]
		if errs[0] != nil {
			winner, loser, lerr = bds[1], bds[0], errs[0]
		}
		var owned *ReleaseOwnedError
		if !errors.As(lerr, &owned) || owned.Owner != winner {
			t.Fatalf("round %d: %s failed with %v, want a ReleaseOwnedError of %s", round, loser, lerr, winner)
		}
		shared, err := core.ConfigMaps(ns).Get(ctx, "shared", metav1.GetOptions{})
		if err != nil || shared.Data["x"] != winner {
			t.Fatalf("round %d: shared ConfigMap %v (err %v), want %s's", round, shared.Data, err, winner)
		}
		if _, err := core.ConfigMaps(ns).Get(ctx, "only-"+loser, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("round %d: %s's own ConfigMap: err = %v, want NotFound", round, loser, err)
		}
		if _, err := core.ConfigMaps(ns).Get(ctx, "only-"+winner, metav1.GetOptions{}); err != nil {
			t.Fatalf("round %d: %s's own ConfigMap: %v", round, winner, err)
		}
		list, err := core.Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=raced"})
		if err != nil || len(list.Items) != 1 || list.Items[0].Labels[StorageBundleIDLabel] != winner {
			t.Fatalf("round %d: stored revisions %d (err %v), want one, of %s", round, len(list.Items), err, winner)
		}
	}
}
