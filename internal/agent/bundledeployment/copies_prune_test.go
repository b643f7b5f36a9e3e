package bundledeployment_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
)

// brokenYAML is a manifest the agent cannot parse: the deploy fails before
// Helm writes anything.
const brokenYAML = "apiVersion: v1\nkind: ConfigMap\nmetadata: [name: broken\n"

// wantCopy fails the test unless the copy ns/name exists, made for bd.
func wantCopy(t *testing.T, ns, name, bd string) {
	t.Helper()
	s, err := downSecret(t, ns, name)
	if err != nil {
		t.Fatalf("copy %s/%s: %v", ns, name, err)
	}
	if s.Labels[fleet.BundleDeploymentLabel] != bd {
		t.Fatalf("copy %s/%s labelled %q, want %s", ns, name, s.Labels[fleet.BundleDeploymentLabel], bd)
	}
}

// wantCopyGone waits until the Secret ns/name is gone.
func wantCopyGone(t *testing.T, ns, name string) {
	t.Helper()
	eventually(t, "copy "+ns+"/"+name+" deleted", func() error {
		if _, err := downSecret(t, ns, name); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (err %v)", err)
		}
		return nil
	})
}

// A commit that drops a downstreamResources entry and cannot be deployed
// (broken YAML) must not take the Secret away from the release still
// running: the copy goes only once a deploy without the entry succeeded.
func TestDroppedCopyKeptWhileDeployFails(t *testing.T) {
	const name, ns = "prunebad", "prunebad-ns"
	createObjects(t, up.Client, upstreamSecret("prunebad-creds", "s3cret"))
	b := bundle{name: name, files: map[string]string{"cm.yaml": cmFile(name, "v1")}, opts: fleet.BundleDeploymentOptions{
		DefaultNamespace:    ns,
		DownstreamResources: []fleet.DownstreamResource{{Kind: "Secret", Name: "prunebad-creds"}},
	}}
	waitState(t, name, put(t, b), fleet.Ready)
	wantCopy(t, ns, "prunebad-creds", name)

	b.opts.DownstreamResources = nil
	b.files = map[string]string{"cm.yaml": brokenYAML}
	put(t, b)
	waitDeployError(t, name, "yaml")
	wantCopy(t, ns, "prunebad-creds", name)
	wantData(t, ns, name, "k", "v1")
	if bd := getBD(t, name); bd.Status.Release != ns+"/"+name+":1" {
		t.Fatalf("status.release %q after the failed deploy, want %s/%s:1", bd.Status.Release, ns, name)
	}

	b.files = map[string]string{"cm.yaml": cmFile(name, "v3")}
	waitState(t, name, put(t, b), fleet.Ready)
	// Ready is reported after the stale copies were deleted.
	if _, err := downSecret(t, ns, "prunebad-creds"); !apierrors.IsNotFound(err) {
		t.Fatalf("copy of the dropped entry after a successful deploy: err = %v, want NotFound", err)
	}
	wantData(t, ns, name, "k", "v3")
	deleteBD(t, name)
}

// forget makes the agent forget what it deployed for name, as a restart
// does: a pause drops the in-memory state and the drift watch.
func forget(t *testing.T, name string) {
	t.Helper()
	setPaused(t, name, true)
	eventually(t, "pause forgets "+name, func() error {
		if n := bundledeployment.WatchedObjects(clusterNS, name); n != 0 {
			return fmt.Errorf("%d objects still watched", n)
		}
		return nil
	})
}

// An agent that did not deploy the previous list itself (restarted, here
// a pause, which forgets as a restart does) still deletes the copies of
// entries that left it, and a BundleDeployment deleted while the agent
// does not know it deletes its copies.
func TestCopiesRemovedAfterRestart(t *testing.T) {
	const name, ns = "prunerestart", "prunerestart-ns"
	createObjects(t, up.Client, upstreamSecret("pr-a", "a"), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "pr-b", Namespace: clusterNS}, Data: map[string]string{"b": "b"},
	})
	b := bundle{name: name, files: map[string]string{"cm.yaml": cmFile(name, "v1")}, opts: fleet.BundleDeploymentOptions{
		DefaultNamespace:    ns,
		DownstreamResources: []fleet.DownstreamResource{{Kind: "Secret", Name: "pr-a"}, {Kind: "ConfigMap", Name: "pr-b"}},
	}}
	waitState(t, name, put(t, b), fleet.Ready)
	wantCopy(t, ns, "pr-a", name)

	forget(t, name)
	b.opts.DownstreamResources = nil
	id := put(t, b)
	setPaused(t, name, false)
	waitState(t, name, id, fleet.Ready)
	if _, err := downSecret(t, ns, "pr-a"); !apierrors.IsNotFound(err) {
		t.Fatalf("copy pr-a of a dropped entry after a restart: err = %v, want NotFound", err)
	}
	if _, err := configMap(t, ns, "pr-b"); !apierrors.IsNotFound(err) {
		t.Fatalf("copy pr-b of a dropped entry after a restart: err = %v, want NotFound", err)
	}

	b.opts.DownstreamResources = []fleet.DownstreamResource{{Kind: "Secret", Name: "pr-a"}}
	waitState(t, name, put(t, b), fleet.Ready)
	wantCopy(t, ns, "pr-a", name)
	forget(t, name)
	deleteBD(t, name)
	waitNoReleaseSecrets(t, ns, name)
	wantCopyGone(t, ns, "pr-a")
}

// A first install that fails after the copies were made stores no
// release; deleting the BundleDeployment still deletes its copies, and
// only its own: another bundle's copy in the same namespace stays.
func TestCopiesOfFailedFirstInstallRemoved(t *testing.T) {
	const name, ns = "failfirst", "failfirst-ns"
	createObjects(t, up.Client, upstreamSecret("ff-creds", "x"), upstreamSecret("ff-other-creds", "y"))
	other := bundle{name: "failfirst-other", files: map[string]string{"cm.yaml": cmFile("failfirst-other", "v1")}, opts: fleet.BundleDeploymentOptions{
		DefaultNamespace:    ns,
		DownstreamResources: []fleet.DownstreamResource{{Kind: "Secret", Name: "ff-other-creds"}},
	}}
	waitState(t, other.name, put(t, other), fleet.Ready)

	put(t, bundle{name: name, files: map[string]string{"cm.yaml": brokenYAML}, opts: fleet.BundleDeploymentOptions{
		DefaultNamespace:    ns,
		DownstreamResources: []fleet.DownstreamResource{{Kind: "Secret", Name: "ff-creds"}},
	}})
	waitDeployError(t, name, "yaml")
	wantCopy(t, ns, "ff-creds", name)

	deleteBD(t, name)
	wantCopyGone(t, ns, "ff-creds")
	wantCopy(t, ns, "ff-other-creds", other.name)
	deleteBD(t, other.name)
	wantCopyGone(t, ns, "ff-other-creds")
}

// Copies kept with keepResources stay when the clean-up of their gone
// BundleDeployment runs again (a reconcile queued before the deletion),
// although no release is left to say keepResources then: the copy says
// it, and one that does not (made by an earlier agent) is kept too.
func TestKeptCopiesSurviveAnotherCleanup(t *testing.T) {
	const name, ns = "keeptwice", "keeptwice-ns"
	ctx := context.Background()
	createObjects(t, up.Client, upstreamSecret("kt-creds", "x"))
	b := bundle{name: name, files: map[string]string{"cm.yaml": cmFile(name, "v1")}, opts: fleet.BundleDeploymentOptions{
		DefaultNamespace: ns, KeepResources: true,
		DownstreamResources: []fleet.DownstreamResource{{Kind: "Secret", Name: "kt-creds"}},
	}}
	waitState(t, name, put(t, b), fleet.Ready)
	s, err := downSecret(t, ns, "kt-creds")
	must(t, err)
	if s.Annotations[fleet.KeepResourcesAnnotation] != "true" {
		t.Fatalf("copy annotated %v, want %s=true", s.Annotations, fleet.KeepResourcesAnnotation)
	}
	// As a copy made by an agent that did not annotate keepResources.
	createObjects(t, down.Client, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "kt-old-creds", Namespace: ns,
			Labels: map[string]string{fleet.BundleDeploymentLabel: name}},
		StringData: map[string]string{"password": "old"},
	})

	deleteBD(t, name)
	waitNoReleaseSecrets(t, ns, name)
	must(t, bundledeployment.Cleanup(ctx, clusterNS, name))
	wantCopy(t, ns, "kt-creds", name)
	wantCopy(t, ns, "kt-old-creds", name)
	wantData(t, ns, name, "k", "v1")
}
