package bundledeployment_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
	"github.com/fleetgo/fleet/internal/agent/deployer"
	"github.com/fleetgo/fleet/internal/manifest"
	"github.com/fleetgo/fleet/internal/names"
)

// longName is a valid object name of n characters starting with prefix.
func longName(prefix string, n int) string {
	return prefix + strings.Repeat("x", n-len(prefix))
}

// putLongNamed creates a BundleDeployment whose name is longer than a
// label value may be, as a Bundle created directly with such a name gets:
// the name is in no label (put's bundle label would be refused).
func putLongNamed(t *testing.T, name, file string, opts fleet.BundleDeploymentOptions) string {
	t.Helper()
	ctx := context.Background()
	m, err := manifest.New([]fleet.BundleResource{{Name: "cm.yaml", Content: file}})
	must(t, err)
	id, err := m.ID()
	must(t, err)
	data, err := m.Compressed()
	must(t, err)
	err = up.Client.Create(ctx, &fleet.Content{ObjectMeta: metav1.ObjectMeta{Name: id}, Content: data})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	allowContent(t, id)
	deploymentID, err := manifest.DeploymentID(id, opts)
	must(t, err)
	must(t, up.Client.Create(ctx, &fleet.BundleDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: clusterNS, Labels: map[string]string{
			fleet.BundleLabel: names.Limit(name, 63), fleet.BundleNamespaceLabel: workspace,
			fleet.ClusterLabel: clusterName, fleet.ClusterNamespaceLabel: clusterNS,
			fleet.ManagedLabel: "true", fleet.ContentNameLabel: id,
		}},
		Spec: fleet.BundleDeploymentSpec{DeploymentID: deploymentID, StagedDeploymentID: deploymentID, Options: opts},
	}))
	return deploymentID
}

// releaseSecrets are the stored revisions of release ns/name.
func releaseSecrets(t *testing.T, ns, name string) []corev1.Secret {
	t.Helper()
	l, err := down.Clientset.CoreV1().Secrets(ns).List(context.Background(), listOpts("owner=helm,name="+name))
	must(t, err)
	return l.Items
}

// unchanged fails the test unless every object of want still exists as
// the same object (same UID, not being deleted).
func unchanged(t *testing.T, ns string, want map[string]types.UID, get func(name string) (metav1.Object, error)) {
	t.Helper()
	for name, uid := range want {
		o, err := get(name)
		if err != nil {
			t.Fatalf("%s/%s after garbage collection: %v", ns, name, err)
		}
		if o.GetUID() != uid || o.GetDeletionTimestamp() != nil {
			t.Fatalf("%s/%s was removed (or is being removed) by garbage collection", ns, name)
		}
	}
}

// A BundleDeployment may be named with up to 253 characters, while the
// label the agent puts on its release's storage holds at most 63: the
// label is a cut name. Garbage collection must not take the cut name for
// a BundleDeployment that is gone and uninstall the release of one that
// exists; deleting that BundleDeployment still uninstalls it.
func TestLongNamedBundleDeploymentKeptByGarbageCollection(t *testing.T) {
	ctx := context.Background()
	name := longName("long-named-bundle-deployment-", 70)
	const ns = "longname-ns"
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns}
	waitState(t, name, putLongNamed(t, name, cmFile("long-named", "v1"), opts), fleet.Ready)
	release := deployer.ReleaseName(name, opts)

	stored := releaseSecrets(t, ns, release)
	if len(stored) == 0 {
		t.Fatal("no release stored")
	}
	if got := stored[0].Labels[deployer.StorageBundleIDLabel]; got == name || len(got) > 63 {
		t.Fatalf("storage label %q: this test needs a name the label cannot hold", got)
	}
	secrets := map[string]types.UID{}
	for _, s := range stored {
		secrets[s.Name] = s.UID
	}
	cm, err := configMap(t, ns, "long-named")
	must(t, err)

	// Two passes: the second would see what the first left.
	for range 2 {
		must(t, bundledeployment.Collect(ctx))
	}
	unchanged(t, ns, secrets, func(n string) (metav1.Object, error) {
		return down.Clientset.CoreV1().Secrets(ns).Get(ctx, n, metav1.GetOptions{})
	})
	unchanged(t, ns, map[string]types.UID{cm.Name: cm.UID}, func(n string) (metav1.Object, error) {
		return configMap(t, ns, n)
	})

	deleteBD(t, name)
	wantGone(t, ns, "long-named")
	waitNoReleaseSecrets(t, ns, release)
}

// A long-named release whose BundleDeployment never existed is still
// collected (its chart names the BundleDeployment). One whose storage label
// may be a cut name that its release does not confirm is kept: the agent
// cannot tell which BundleDeployment it belongs to.
func TestLongNamedOrphanCollectedUnresolvedKept(t *testing.T) {
	ctx := context.Background()
	const ns = "longname-gc-ns"
	dep, err := deployer.New(down.Config, agentNS)
	must(t, err)
	// Deployed as another agent's first, so that the running agent's
	// collector sees the odd release only once its label is changed.
	other, err := deployer.New(down.Config, "longname-other-agent")
	must(t, err)
	deploy := func(d *deployer.Deployer, bd, cm string) string {
		t.Helper()
		m, err := manifest.New([]fleet.BundleResource{{Name: "cm.yaml", Content: cmFile(cm, "x")}})
		must(t, err)
		rel, err := d.Deploy(ctx, deployer.Input{Name: bd, Manifest: m, Options: fleet.BundleDeploymentOptions{DefaultNamespace: ns}})
		must(t, err)
		return rel.Name
	}
	orphan := deploy(dep, longName("long-orphan-never-existed-", 80), "long-orphan")
	odd := deploy(other, longName("long-odd-label-", 80), "long-odd")
	// The odd release becomes this agent's, its label the cut of another
	// name than its chart records.
	for _, s := range releaseSecrets(t, ns, odd) {
		s.Labels[deployer.StorageBundleIDLabel] = names.Limit(longName("someone-else-", 90), 63)
		s.Labels[deployer.StorageAgentNamespaceLbl] = agentNS
		_, err := down.Clientset.CoreV1().Secrets(ns).Update(ctx, &s, metav1.UpdateOptions{})
		must(t, err)
	}
	oddSecrets := map[string]types.UID{}
	for _, s := range releaseSecrets(t, ns, odd) {
		oddSecrets[s.Name] = s.UID
	}

	must(t, bundledeployment.Collect(ctx))
	wantGone(t, ns, "long-orphan")
	waitNoReleaseSecrets(t, ns, orphan)
	unchanged(t, ns, oddSecrets, func(n string) (metav1.Object, error) {
		return down.Clientset.CoreV1().Secrets(ns).Get(ctx, n, metav1.GetOptions{})
	})
	if _, err := configMap(t, ns, "long-odd"); err != nil {
		t.Fatalf("the release of an unresolved label lost its object: %v", err)
	}

	// Not left for the other tests' garbage collection.
	must(t, dep.Uninstall(ctx, deployer.UninstallInput{ReleaseName: odd, Namespace: ns}))
	if n := len(releaseSecrets(t, ns, odd)); n != 0 {
		t.Fatalf("%d revisions left", n)
	}
}
