package deployer

import (
	"context"
	"strings"
	"testing"
	"time"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	rcommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// plantRevision stores, as a user who may only create Secrets in ns can,
// an unsigned revision 1 of release bd that claims to be the agent's
// release of BundleDeployment bd (every label and chart annotation adopt
// checks), listing manifest.
func plantRevision(t *testing.T, d *Deployer, ns, agentNS, bd, manifest string) *corev1.Secret {
	t.Helper()
	rel := &release.Release{Name: bd, Namespace: ns, Version: 1, Manifest: manifest,
		Info: &release.Info{Status: rcommon.StatusDeployed},
		Chart: &chart.Chart{Metadata: &chart.Metadata{APIVersion: "v2", Name: bd, Version: "0.0.1", Annotations: map[string]string{
			fleet.BundleIDAnnotation: bd, fleet.AgentNamespaceAnnotation: agentNS}}},
		Labels: map[string]string{StorageBundleIDLabel: bd, StorageAgentNamespaceLbl: agentNS,
			StorageKeepResourcesLabel: "false", StorageDeleteNSLabel: "false"}}
	sec, err := secretOf(storageKey(bd, 1), rel, "createdAt")
	if err != nil {
		t.Fatal(err)
	}
	created, err := d.core.Secrets(ns).Create(context.Background(), sec, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// afterSecondOf waits until the API server's next creation timestamp is
// later than ts (creation times have whole seconds).
func afterSecondOf(ts metav1.Time) {
	for !time.Now().After(ts.Add(time.Second)) {
		time.Sleep(50 * time.Millisecond)
	}
}

// cutoffOf is the adoption cutoff recorded on agent namespace ns.
func cutoffOf(t *testing.T, d *Deployer, ns string) string {
	t.Helper()
	obj, err := d.core.Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return obj.Annotations[SigningCutoffAnnotation]
}

// Deleting the signing key does not move the adoption cutoff: an unsigned
// revision someone planted after the first key existed (and before the new
// one) is not adopted by the restarted agent, not even when a deploy of the
// BundleDeployment it claims comes — it would otherwise become the
// release's current revision, and the upgrade would delete what it lists.
func TestSigningKeyDeletedKeepsCutoff(t *testing.T) {
	ctx := context.Background()
	const agentNS, ns = "trust-cutoff-agent", "trust-cutoff"
	cfg := downstream(t).Config
	d, err := New(cfg, agentNS)
	if err != nil {
		t.Fatal(err)
	}
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns}
	if _, err := deployFiles(t, d, "app", cmFile("app", "v1"), opts); err != nil {
		t.Fatal(err)
	}
	key1, err := d.core.Secrets(agentNS).Get(ctx, SigningKeySecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	victim, err := d.core.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cutoff-victim", Namespace: ns}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Planted after the first key, then the key is deleted and the agent
	// restarts: it creates a new key, in a later second still.
	afterSecondOf(key1.CreationTimestamp)
	planted := plantRevision(t, d, ns, agentNS, "planted", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cutoff-victim\n  namespace: "+ns+"\n")
	afterSecondOf(planted.CreationTimestamp)
	if err := d.core.Secrets(agentNS).Delete(ctx, SigningKeySecret, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	restarted, err := New(cfg, agentNS)
	if err != nil {
		t.Fatal(err)
	}
	if cur, err := restarted.Current(context.Background(), "planted", opts); err != nil || cur != nil {
		t.Fatalf("the planted revision is the current release of its BundleDeployment: %v (%v)", cur, err)
	}
	_, err = deployFiles(t, restarted, "planted", cmFile("planted", "v2"), opts)
	if err == nil || !strings.Contains(err.Error(), "did not write") {
		t.Fatalf("deploying the BundleDeployment the planted revision claims: %v, want a refusal", err)
	}
	sec, err := d.core.Secrets(ns).Get(ctx, planted.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sec.Labels[SignatureLabel] != "" {
		t.Fatal("the planted revision was adopted (signed) after the key was deleted")
	}
	refs, err := restarted.Releases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range refs {
		if r.Name == "planted" {
			t.Fatalf("the planted revision is listed as the agent's release: %v", releaseNames(refs))
		}
	}
	if cm, err := d.core.ConfigMaps(ns).Get(ctx, victim.Name, metav1.GetOptions{}); err != nil || cm.UID != victim.UID {
		t.Fatalf("what the planted revision lists was deleted: %v", err)
	}

	// The cutoff is the first key's creation, recorded where a user of
	// the release namespace cannot write, and the new key did not move it.
	key2, err := d.core.Secrets(agentNS).Get(ctx, SigningKeySecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !key1.CreationTimestamp.Before(&key2.CreationTimestamp) {
		t.Fatalf("the new key (%v) is not younger than the first (%v)", key2.CreationTimestamp, key1.CreationTimestamp)
	}
	if got, want := cutoffOf(t, d, agentNS), key1.CreationTimestamp.UTC().Format(time.RFC3339); got != want {
		t.Fatalf("recorded cutoff %q, want the first key's creation %q", got, want)
	}
}

// An agent upgraded from a build that signed but recorded no cutoff (its
// key exists, the annotation does not) records the existing key's
// creation time, not the time it starts.
func TestCutoffRecordedFromExistingKey(t *testing.T) {
	ctx := context.Background()
	const agentNS = "trust-cutoff-existing-agent"
	cfg := downstream(t).Config
	d, err := New(cfg, agentNS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.signer(ctx); err != nil {
		t.Fatal(err)
	}
	key, err := d.core.Secrets(agentNS).Get(ctx, SigningKeySecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nsObj, err := d.core.Namespaces().Get(ctx, agentNS, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(nsObj.Annotations, SigningCutoffAnnotation)
	if _, err := d.core.Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	afterSecondOf(key.CreationTimestamp)
	restarted, err := New(cfg, agentNS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := restarted.signer(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := cutoffOf(t, d, agentNS), key.CreationTimestamp.UTC().Format(time.RFC3339); got != want {
		t.Fatalf("recorded cutoff %q, want the existing key's creation %q", got, want)
	}
}

// When the agent cannot record the cutoff (here: an identity that may not
// update Namespaces), it adopts nothing rather than adopting up to a
// cutoff it could not make last; everything else works. Once it can
// record it, pre-key storage is adopted as usual.
func TestCutoffUnrecordedAdoptsNothing(t *testing.T) {
	ctx := context.Background()
	const agentNS, ns, user = "trust-cutoff-closed-agent", "trust-cutoff-closed", "trust-cutoff-no-namespace-update"
	admin := downstream(t).Config
	cs := downstream(t).Clientset
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps", "serviceaccounts"}, Verbs: []string{"*"}},
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch", "create"}},
		}}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{agentNS, ns} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	restricted := rest.CopyConfig(admin)
	restricted.Impersonate = rest.ImpersonationConfig{UserName: user}
	d, err := New(restricted, agentNS)
	if err != nil {
		t.Fatal(err)
	}
	// Stored before any key: what adoption is for.
	pre := plantRevision(t, d, ns, agentNS, "pre", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: pre\n  namespace: "+ns+"\n")
	afterSecondOf(pre.CreationTimestamp)

	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns}
	if _, err := deployFiles(t, d, "fresh", cmFile("fresh", "v1"), opts); err != nil {
		t.Fatalf("deploying without a recorded cutoff: %v", err)
	}
	if _, err := deployFiles(t, d, "pre", cmFile("pre", "v2"), opts); err == nil || !strings.Contains(err.Error(), "did not write") {
		t.Fatalf("deploying pre-key storage without a recorded cutoff: %v, want a refusal", err)
	}
	if got := cutoffOf(t, d, agentNS); got != "" {
		t.Fatalf("cutoff %q recorded by an identity that may not", got)
	}

	withRights, err := New(admin, agentNS)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := deployFiles(t, withRights, "pre", cmFile("pre", "v2"), opts)
	if err != nil || rel.Version != 2 {
		t.Fatalf("deploying pre-key storage once the cutoff is recorded: %v (%v)", rel, err)
	}
}
