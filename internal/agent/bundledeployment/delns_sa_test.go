package bundledeployment_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/deployer"
	"github.com/fleetgo/fleet/internal/manifest"
)

// nsKeeper is a serviceAccount that may deploy ConfigMaps (and store Helm
// releases) in its namespaces, and read them, but not delete them.
const nsKeeper = "ns-keeper"

// allowOnlyConfigMaps creates ns and grants nsKeeper only what deploying
// ConfigMaps into it takes.
func allowOnlyConfigMaps(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNS}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: nsKeeper, Namespace: agentNS}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: nsKeeper, Namespace: ns}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}},
			// Helm's release storage.
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"*"}},
		}},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: nsKeeper, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: nsKeeper},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: nsKeeper, Namespace: agentNS}},
		},
	} {
		if err := down.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// deleteNamespace deletes the namespace as the bundle's serviceAccount,
// never as the agent: removing a bundle can do no more than deploying it
// could. The release is removed all the same, the namespace stays, and the
// refusal is reported (to the reconciler, which logs it) once: the release
// being gone, nothing is retried.
func TestDeleteNamespaceAsServiceAccount(t *testing.T) {
	ctx := context.Background()
	t.Run("bundle", func(t *testing.T) {
		const ns = "sa-delns"
		allowOnlyConfigMaps(t, ns)
		id := put(t, bundle{
			name:  "sa-delns",
			files: map[string]string{"cm.yaml": cmFile("kept-ns", "x")},
			opts:  fleet.BundleDeploymentOptions{DefaultNamespace: ns, ServiceAccount: nsKeeper, DeleteNamespace: true},
		})
		waitState(t, "sa-delns", id, fleet.Ready)
		deleteBD(t, "sa-delns")
		wantGone(t, ns, "kept-ns")
		waitNoReleaseSecrets(t, ns, "sa-delns")
		// The delete follows the release's removal at once; give a
		// wrong one time to show.
		time.Sleep(2 * time.Second)
		namespaceActive(t, ns)
	})

	t.Run("error", func(t *testing.T) {
		const ns = "sa-delns-direct"
		allowOnlyConfigMaps(t, ns)
		dep, err := deployer.New(down.Config, agentNS)
		must(t, err)
		m, err := manifest.New([]fleet.BundleResource{{Name: "cm.yaml", Content: cmFile("direct", "x")}})
		must(t, err)
		opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns, ServiceAccount: nsKeeper, DeleteNamespace: true}
		_, err = dep.Deploy(ctx, deployer.Input{Name: "sa-delns-direct", Manifest: m, Options: opts})
		must(t, err)
		in := deployer.UninstallInput{ReleaseName: "sa-delns-direct", Namespace: ns, BundleDeployment: "sa-delns-direct", DeleteNamespace: true}
		err = dep.Uninstall(ctx, in)
		identity := "system:serviceaccount:" + agentNS + ":" + nsKeeper
		if err == nil || !strings.Contains(err.Error(), "namespace "+ns+" kept") || !strings.Contains(err.Error(), identity) ||
			!apierrors.IsForbidden(err) {
			t.Fatalf("uninstall: %v, want the refusal for %s", err, identity)
		}
		namespaceActive(t, ns)
		wantGone(t, ns, "direct")
		// The reconciler's retry lists the releases left to remove: none.
		refs, err := dep.Releases(ctx)
		must(t, err)
		for _, r := range refs {
			if r.BundleDeployment == in.BundleDeployment {
				t.Fatalf("release still listed after the uninstall: %+v", r)
			}
		}
	})

	// Without a serviceAccount (and no fleet-default account) the agent
	// deletes it, as it deployed it.
	t.Run("no serviceAccount", func(t *testing.T) {
		const ns = "nosa-delns"
		id := put(t, bundle{
			name:  "nosa-delns",
			files: map[string]string{"cm.yaml": cmFile("gone-ns", "x")},
			opts:  fleet.BundleDeploymentOptions{DefaultNamespace: ns, DeleteNamespace: true},
		})
		waitState(t, "nosa-delns", id, fleet.Ready)
		deleteBD(t, "nosa-delns")
		eventually(t, "namespace deleted", func() error {
			n := &corev1.Namespace{}
			err := down.Client.Get(ctx, client.ObjectKey{Name: ns}, n)
			if apierrors.IsNotFound(err) || (err == nil && n.DeletionTimestamp != nil) {
				return nil
			}
			return errors.New("namespace still active")
		})
	})
}
