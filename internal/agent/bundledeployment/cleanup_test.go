package bundledeployment_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/deployer"
	"github.com/fleetgo/fleet/internal/manifest"
)

func cmFile(name, value string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata:\n  k: \"" + value + "\"\n"
}

// waitNoReleaseSecrets waits until no revision of release name is stored in
// ns.
func waitNoReleaseSecrets(t *testing.T, ns, name string) {
	t.Helper()
	eventually(t, "release "+ns+"/"+name+" storage removed", func() error {
		l, err := down.Clientset.CoreV1().Secrets(ns).List(context.Background(), listOpts("owner=helm,name="+name))
		if err != nil || len(l.Items) != 0 {
			return fmt.Errorf("%d release secrets (err %v)", len(l.Items), err)
		}
		return nil
	})
}

// namespaceActive fails the test when ns is gone or being deleted.
func namespaceActive(t *testing.T, ns string) {
	t.Helper()
	n := &corev1.Namespace{}
	must(t, down.Client.Get(context.Background(), client.ObjectKey{Name: ns}, n))
	if n.DeletionTimestamp != nil {
		t.Fatalf("namespace %s is being deleted", ns)
	}
}

// keepResources is read from the release's latest revision: a user adds
// keepResources to a bundle deployed long ago (older revisions without it
// are still stored) and then deletes it; the objects stay.
func TestKeepResourcesAddedLater(t *testing.T) {
	b := bundle{
		name:  "keeplater",
		files: map[string]string{"cm.yaml": cmFile("kept-later", "v1")},
		opts:  fleet.BundleDeploymentOptions{DefaultNamespace: "keeplater-ns"},
	}
	waitState(t, b.name, put(t, b), fleet.Ready)
	b.files["cm.yaml"] = cmFile("kept-later", "v2")
	waitState(t, b.name, put(t, b), fleet.Ready)
	b.opts.KeepResources = true
	bd := waitState(t, b.name, put(t, b), fleet.Ready)
	if bd.Status.Release != "keeplater-ns/keeplater:3" {
		t.Fatalf("release %q, want revision 3", bd.Status.Release)
	}
	deleteBD(t, b.name)
	waitNoReleaseSecrets(t, "keeplater-ns", "keeplater")
	wantData(t, "keeplater-ns", "kept-later", "k", "v2")
}

// Releases describes each release by its latest revision, compared as a
// number (the API server lists revision 10 before 9).
func TestReleasesReadsLatestRevision(t *testing.T) {
	ctx := context.Background()
	// Another agent namespace: the agent under test leaves these alone.
	dep, err := deployer.New(down.Config, "latest-agent")
	must(t, err)
	m, err := manifest.New([]fleet.BundleResource{{Name: "cm.yaml", Content: cmFile("latest", "x")}})
	must(t, err)
	ref := func() deployer.ReleaseRef {
		t.Helper()
		refs, err := dep.Releases(ctx)
		must(t, err)
		if len(refs) != 1 {
			t.Fatalf("releases %+v, want one", refs)
		}
		return refs[0]
	}
	for v := 1; v <= 10; v++ {
		keep := v == 3 || v == 10
		_, err := dep.Deploy(ctx, deployer.Input{Name: "latest", Manifest: m, Options: fleet.BundleDeploymentOptions{
			DefaultNamespace: "latest-ns", KeepResources: keep, DeleteNamespace: keep,
			Helm: &fleet.HelmOptions{MaxHistory: 3},
		}})
		must(t, err)
		switch v {
		case 3, 10:
			if r := ref(); !r.KeepResources || !r.DeleteNamespace {
				t.Fatalf("after revision %d: %+v, want the flags of the latest revision", v, r)
			}
		case 9:
			if r := ref(); r.KeepResources {
				t.Fatalf("after revision %d: %+v, want the flags of the latest revision", v, r)
			}
		}
	}
	r := ref()
	must(t, dep.Uninstall(ctx, deployer.UninstallInput{
		ReleaseName: r.Name, Namespace: r.Namespace, KeepResources: r.KeepResources, DeleteNamespace: r.DeleteNamespace,
	}))
	wantData(t, "latest-ns", "latest", "k", "x")
	namespaceActive(t, "latest-ns")
}

// deleteNamespace never deletes the agent's own namespace, a namespace
// holding the objects keepResources just kept, or one where another Helm
// release is still stored; otherwise it does.
func TestDeleteNamespaceSpares(t *testing.T) {
	ctx := context.Background()
	dep, err := deployer.New(down.Config, "own-agent-ns")
	must(t, err)
	deploy := func(bd, ns, cm string) {
		t.Helper()
		m, err := manifest.New([]fleet.BundleResource{{Name: "cm.yaml", Content: cmFile(cm, "x")}})
		must(t, err)
		_, err = dep.Deploy(ctx, deployer.Input{Name: bd, Manifest: m, Options: fleet.BundleDeploymentOptions{DefaultNamespace: ns}})
		must(t, err)
	}
	uninstall := func(bd, ns string, keep bool) {
		t.Helper()
		must(t, dep.Uninstall(ctx, deployer.UninstallInput{ReleaseName: bd, Namespace: ns, KeepResources: keep, DeleteNamespace: true}))
	}

	t.Run("agent namespace", func(t *testing.T) {
		deploy("in-agent-ns", "own-agent-ns", "a")
		uninstall("in-agent-ns", "own-agent-ns", false)
		namespaceActive(t, "own-agent-ns")
	})
	t.Run("keepResources", func(t *testing.T) {
		deploy("kept", "kept-delns", "kept")
		uninstall("kept", "kept-delns", true)
		namespaceActive(t, "kept-delns")
		wantData(t, "kept-delns", "kept", "k", "x")
	})
	t.Run("another release", func(t *testing.T) {
		deploy("first", "shared-delns", "first")
		deploy("second", "shared-delns", "second")
		uninstall("first", "shared-delns", false)
		namespaceActive(t, "shared-delns")
		wantData(t, "shared-delns", "second", "k", "x")
		wantGone(t, "shared-delns", "first")
	})

	// The last release of the namespace goes: so does the namespace.
	uninstall("second", "shared-delns", false)
	n := &corev1.Namespace{}
	err = down.Client.Get(ctx, client.ObjectKey{Name: "shared-delns"}, n)
	if !apierrors.IsNotFound(err) && (err != nil || n.DeletionTimestamp == nil) {
		t.Fatalf("namespace shared-delns not deleted (err %v)", err)
	}
}

// An upgrade does not adopt an object of another release unless
// helm.takeOwnership, as an install does not.
func TestUpgradeTakeOwnership(t *testing.T) {
	ctx := context.Background()
	a := bundle{
		name:  "owner-a",
		files: map[string]string{"cm.yaml": cmFile("contested", "from-a")},
		opts:  fleet.BundleDeploymentOptions{DefaultNamespace: "contest-ns"},
	}
	waitState(t, a.name, put(t, a), fleet.Ready)
	b := bundle{
		name:  "owner-b",
		files: map[string]string{"b.yaml": cmFile("b-own", "b")},
		opts:  fleet.BundleDeploymentOptions{DefaultNamespace: "contest-ns"},
	}
	waitState(t, b.name, put(t, b), fleet.Ready)

	// owner-b's next version adds owner-a's object: refused.
	b.files["cm.yaml"] = cmFile("contested", "from-b")
	put(t, b)
	c := waitDeployError(t, b.name, "exists and cannot be imported into the current release")
	t.Logf("upgrade without takeOwnership: %s", c.Message)
	wantData(t, "contest-ns", "contested", "k", "from-a")
	cm, err := configMap(t, "contest-ns", "contested")
	must(t, err)
	if owner := cm.Annotations["meta.helm.sh/release-name"]; owner != "owner-a" {
		t.Fatalf("contested owned by %q", owner)
	}

	// With takeOwnership the upgrade adopts it.
	b.opts.Helm = &fleet.HelmOptions{TakeOwnership: true}
	waitState(t, b.name, put(t, b), fleet.Ready)
	wantData(t, "contest-ns", "contested", "k", "from-b")
	eventually(t, "contested adopted by owner-b", func() error {
		cm := &corev1.ConfigMap{}
		if err := down.Client.Get(ctx, client.ObjectKey{Namespace: "contest-ns", Name: "contested"}, cm); err != nil {
			return err
		}
		if owner := cm.Annotations["meta.helm.sh/release-name"]; owner != "owner-b" {
			return fmt.Errorf("owned by %q", owner)
		}
		return nil
	})
}

// When helm.releaseName changes, the release it replaced is removed once
// the new one is deployed; while the new one fails, the old one stays.
func TestRenamedReleaseCollected(t *testing.T) {
	b := bundle{
		name:  "rename",
		files: map[string]string{"cm.yaml": cmFile("rename-one", "1")},
		opts:  fleet.BundleDeploymentOptions{DefaultNamespace: "rename-ns", Helm: &fleet.HelmOptions{ReleaseName: "rename-one"}},
	}
	waitState(t, b.name, put(t, b), fleet.Ready)

	// A new name that cannot deploy: the old release stays (the test
	// agent collects every ~5s).
	b.opts.Helm.ReleaseName = "rename-bad"
	b.files["cm.yaml"] = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: rename-bad\ndata:\n  k: 1\n"
	put(t, b)
	waitDeployError(t, b.name, "expected string")
	time.Sleep(12 * time.Second)
	wantData(t, "rename-ns", "rename-one", "k", "1")

	// A name that deploys: the old release goes, the new one stays.
	b.opts.Helm.ReleaseName = "rename-two"
	b.files["cm.yaml"] = cmFile("rename-two", "2")
	waitState(t, b.name, put(t, b), fleet.Ready)
	wantGone(t, "rename-ns", "rename-one")
	waitNoReleaseSecrets(t, "rename-ns", "rename-one")
	// So does the one that failed.
	waitNoReleaseSecrets(t, "rename-ns", "rename-bad")
	time.Sleep(6 * time.Second)
	wantData(t, "rename-ns", "rename-two", "k", "2")
	l, err := down.Clientset.CoreV1().Secrets("rename-ns").List(context.Background(), listOpts("owner=helm,name=rename-two"))
	must(t, err)
	if len(l.Items) == 0 {
		t.Fatal("release rename-two removed")
	}
	namespaceActive(t, "rename-ns")
}

// A CRD that another bundle's release owns is not taken over without
// helm.takeOwnership: uninstalling either bundle would delete it, with
// every custom resource of it, under the other. With takeOwnership it is.
func TestCRDOwnedByAnotherRelease(t *testing.T) {
	crd := crdYAML("example.net", "Cog")
	first := bundle{name: "cogs-a", files: map[string]string{"crd.yaml": crd}, opts: fleet.BundleDeploymentOptions{DefaultNamespace: "cogs-a-ns"}}
	waitState(t, first.name, put(t, first), fleet.Ready)
	second := bundle{name: "cogs-b", files: map[string]string{"crd.yaml": crd}, opts: fleet.BundleDeploymentOptions{DefaultNamespace: "cogs-b-ns"}}
	put(t, second)
	waitDeployError(t, second.name, "CRD cogs.example.net exists and belongs to release cogs-a-ns/cogs-a")
	live := &apiextensionsv1.CustomResourceDefinition{}
	must(t, down.Client.Get(context.Background(), client.ObjectKey{Name: "cogs.example.net"}, live))
	if got := live.Annotations["meta.helm.sh/release-name"]; got != "cogs-a" {
		t.Fatalf("the CRD changed owner without takeOwnership: %q", got)
	}
	second.opts.Helm = &fleet.HelmOptions{TakeOwnership: true}
	waitState(t, second.name, put(t, second), fleet.Ready)
	must(t, down.Client.Get(context.Background(), client.ObjectKey{Name: "cogs.example.net"}, live))
	if got := live.Annotations["meta.helm.sh/release-name"]; got != "cogs-b" {
		t.Fatalf("with takeOwnership the CRD's owner is %q", got)
	}
}
