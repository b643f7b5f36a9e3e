package bundledeployment_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
	"github.com/fleetgo/fleet/internal/agent/deployer"
)

// legacyCopy is a copy of downstreamResources for bd as an agent made it
// before copies named their agent's namespace.
func legacyCopy(ns, name, bd string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels:      map[string]string{fleet.BundleDeploymentLabel: bd},
			Annotations: map[string]string{fleet.KeepResourcesAnnotation: "false"}},
		StringData: map[string]string{"password": "old"},
	}
}

// Two agents on one downstream cluster (each its own agent namespace) may
// both deploy a BundleDeployment of the same name with downstreamResources.
// Deleting it for one agent after that agent restarted (it then looks for
// copies cluster-wide) deletes that agent's copies only: the other agent's
// stay, and so do copies made before copies named their agent, unless
// they are in the namespace of the deleted release.
func TestCopiesOfAnotherAgentKept(t *testing.T) {
	const name, nsA, nsB, agentB = "twoagents", "twoagents-a", "twoagents-b", "cattle-fleet-system-b"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	createObjects(t, up.Client, upstreamSecret("ta-creds", "x"))
	opts := func(ns string) fleet.BundleDeploymentOptions {
		return fleet.BundleDeploymentOptions{DefaultNamespace: ns,
			DownstreamResources: []fleet.DownstreamResource{{Kind: "Secret", Name: "ta-creds"}}}
	}
	peer, err := bundledeployment.NewPeer(ctx, up.Client, down.Config, clusterNS, agentB)
	must(t, err)
	must(t, peer.Copy(ctx, &fleet.BundleDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: clusterNS},
		Spec:       fleet.BundleDeploymentSpec{Options: opts(nsB)},
	}))
	wantCopy(t, nsB, "ta-creds", name)

	waitState(t, name, put(t, bundle{name: name, files: map[string]string{"cm.yaml": cmFile(name, "v1")}, opts: opts(nsA)}), fleet.Ready)
	wantCopy(t, nsA, "ta-creds", name)
	for ns, agent := range map[string]string{nsA: agentNS, nsB: agentB} {
		s, err := downSecret(t, ns, "ta-creds")
		must(t, err)
		if got := s.Labels[deployer.StorageAgentNamespaceLbl]; got != agent {
			t.Fatalf("copy in %s labelled %s=%q, want %q", ns, deployer.StorageAgentNamespaceLbl, got, agent)
		}
	}
	createObjects(t, down.Client, legacyCopy(nsA, "ta-old", name), legacyCopy(nsB, "ta-old", name))

	forget(t, name)
	deleteBD(t, name)
	waitNoReleaseSecrets(t, nsA, name)
	// The copies go before the release: this agent's are gone now.
	wantCopyGone(t, nsA, "ta-creds")
	wantCopyGone(t, nsA, "ta-old")
	wantCopy(t, nsB, "ta-creds", name)
	wantCopy(t, nsB, "ta-old", name)

	// The other agent's clean-up finds its own copy; the unlabelled one is
	// not where it has a release.
	must(t, peer.Cleanup(ctx, name))
	wantCopyGone(t, nsB, "ta-creds")
	wantCopy(t, nsB, "ta-old", name)
}

// pruneKeeper is a serviceAccount that may deploy into its namespaces and
// write ConfigMaps there, but not delete them.
const pruneKeeper = "prune-keeper"

// grantPruneKeeper creates ns and grants pruneKeeper what deploying
// ConfigMaps and copying ConfigMaps into it takes, plus deleting them when
// canDelete.
func grantPruneKeeper(t *testing.T, ns string, canDelete bool) {
	t.Helper()
	verbs := []string{"get", "list", "watch", "create", "update", "patch"}
	if canDelete {
		verbs = append(verbs, "delete")
	}
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: verbs},
		// Helm's release storage.
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"*"}},
	}
	createObjects(t, down.Client,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNS}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: pruneKeeper, Namespace: agentNS}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: pruneKeeper, Namespace: ns}, Rules: rules},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: pruneKeeper, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: pruneKeeper},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: pruneKeeper, Namespace: agentNS}},
		})
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		r := &rbacv1.Role{}
		if err := down.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: pruneKeeper}, r); err != nil {
			return err
		}
		r.Rules = rules
		return down.Client.Update(context.Background(), r)
	}))
}

// deployedCondition is the BundleDeployment's Deployed condition.
func deployedCondition(t *testing.T, name string) metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(getBD(t, name).Status.Conditions, fleet.ConditionDeployed)
	if c == nil {
		t.Fatalf("%s has no Deployed condition", name)
	}
	return *c
}

// A copy of a dropped downstreamResources entry that the bundle's identity
// may not delete does not undo the deploy that dropped it: the
// BundleDeployment is Deployed and Ready for the new deploymentID, the
// Deployed condition says which copy is left and why, and only the
// deletion is retried (soon, and after a restart), never the deploy: the
// release keeps the revision it was deployed as.
func TestStaleCopyDeletionDeniedKeepsDeploy(t *testing.T) {
	const name, ns = "prunedeny", "prunedeny-ns"
	createObjects(t, up.Client, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "pd-conf", Namespace: clusterNS}, Data: map[string]string{"c": "1"},
	})
	deploy := func(withCopy bool, v string) string {
		b := bundle{name: name, files: map[string]string{"cm.yaml": cmFile(name, v)}, opts: fleet.BundleDeploymentOptions{
			DefaultNamespace: ns, ServiceAccount: pruneKeeper,
		}}
		if withCopy {
			b.opts.DownstreamResources = []fleet.DownstreamResource{{Kind: "ConfigMap", Name: "pd-conf"}}
		}
		return put(t, b)
	}
	// wantReported waits until the Deployed condition says the copy is
	// left and why, the copy still there.
	wantReported := func() {
		t.Helper()
		eventually(t, "Deployed condition reports the copy left", func() error {
			c := deployedCondition(t, name)
			if c.Status != metav1.ConditionTrue || c.Reason != bundledeployment.ReasonStaleCopies ||
				!strings.Contains(c.Message, "pd-conf") || !strings.Contains(c.Message, "forbidden") {
				return fmt.Errorf("Deployed condition %+v", c)
			}
			return nil
		})
		if _, err := configMap(t, ns, "pd-conf"); err != nil {
			t.Fatalf("copy pd-conf while its deletion is denied: %v", err)
		}
	}
	// dropDenied deploys revision rev without the entry while its copy
	// may not be deleted, and checks what the user sees.
	dropDenied := func(rev int) string {
		t.Helper()
		grantPruneKeeper(t, ns, false)
		waitState(t, name, deploy(true, fmt.Sprint("v", rev-1)), fleet.Ready)
		if _, err := configMap(t, ns, "pd-conf"); err != nil {
			t.Fatalf("copy pd-conf: %v", err)
		}
		id := deploy(false, fmt.Sprint("v", rev))
		bd := waitState(t, name, id, fleet.Ready)
		if want := fmt.Sprintf("%s/%s:%d", ns, name, rev); bd.Status.Release != want {
			t.Fatalf("status.release %q, want %s", bd.Status.Release, want)
		}
		wantData(t, ns, name, "k", fmt.Sprint("v", rev))
		wantReported()
		return id
	}
	// wantPruned waits until the copy is gone once allowed, with the
	// release still at revision rev.
	wantPruned := func(id string, rev int) {
		t.Helper()
		eventually(t, "copy pd-conf deleted once allowed", func() error {
			if _, err := configMap(t, ns, "pd-conf"); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there (err %v)", err)
			}
			return nil
		})
		eventually(t, "Deployed condition clear again", func() error {
			if c := deployedCondition(t, name); c.Status != metav1.ConditionTrue || c.Reason != bundledeployment.ReasonDeployed || c.Message != "" {
				return fmt.Errorf("Deployed condition %+v", c)
			}
			return nil
		})
		bd := waitState(t, name, id, fleet.Ready)
		latest := 0
		for _, s := range releaseSecrets(t, ns, name) {
			v, err := strconv.Atoi(s.Labels["version"])
			must(t, err)
			latest = max(latest, v)
		}
		if latest != rev || bd.Status.Release != fmt.Sprintf("%s/%s:%d", ns, name, rev) {
			t.Fatalf("latest release revision %d, status.release %q: want %d and %s/%s:%d (the deploy must not be retried)",
				latest, bd.Status.Release, rev, ns, name, rev)
		}
		if n := bundledeployment.FailedAttempts(clusterNS, name); n != 0 {
			t.Fatalf("%d failed deploy attempts recorded, want 0", n)
		}
	}

	dropDenied(2)
	// A later deploy before the deletion succeeded keeps it due.
	id := deploy(false, "v3")
	waitState(t, name, id, fleet.Ready)
	wantReported()
	grantPruneKeeper(t, ns, true)
	wantPruned(id, 3)

	// After a restart the status alone says the deletion is due.
	id = dropDenied(5)
	forget(t, name)
	grantPruneKeeper(t, ns, true)
	setPaused(t, name, false)
	wantPruned(id, 5)
	deleteBD(t, name)
	waitNoReleaseSecrets(t, ns, name)
}
