package bundledeployment_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/deployer"
)

// createObjects creates objs in c, tolerating those that exist.
func createObjects(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// upstreamSecret is a Secret of the cluster namespace, as the manager
// copies it there for downstreamResources.
func upstreamSecret(name, password string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: clusterNS},
		StringData: map[string]string{"password": password},
	}
}

// downSecret reads a Secret downstream.
func downSecret(t *testing.T, ns, name string) (*corev1.Secret, error) {
	t.Helper()
	s := &corev1.Secret{}
	err := down.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s)
	return s, err
}

// testDownstreamAsServiceAccount is the part of TestServiceAccountImpersonation
// about what the agent does for a bundle besides its release: the copies of
// downstreamResources, their namespace and valuesFrom go through the
// bundle's identity too, and a copy never replaces an object that is not
// one. The account "deployer" may write Secrets and ConfigMaps in sa-ns
// only.
func testDownstreamAsServiceAccount(t *testing.T) {
	ctx := context.Background()
	user := "system:serviceaccount:" + agentNS + ":deployer"
	// Each bundle its own object, so that one failing leaves the others be.
	cm := func(bd string) map[string]string { return map[string]string{"cm.yaml": cmFile(bd+"-cm", "x")} }

	t.Run("copy into a namespace the account may not write", func(t *testing.T) {
		// The object there even carries the label of a copy: only the
		// account's permissions keep it from being replaced.
		createObjects(t, down.Client,
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sa-locked"}},
			&corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "locked-creds", Namespace: "sa-locked",
					Labels: map[string]string{fleet.BundleDeploymentLabel: "sa-locked"}},
				StringData: map[string]string{"password": "original"},
			})
		createObjects(t, up.Client, upstreamSecret("locked-creds", "from-tenant"))
		put(t, bundle{name: "sa-locked", files: cm("sa-locked"), opts: fleet.BundleDeploymentOptions{
			DefaultNamespace: "sa-locked", ServiceAccount: "deployer",
			DownstreamResources: []fleet.DownstreamResource{{Kind: "Secret", Name: "locked-creds"}},
		}})
		waitDeployError(t, "sa-locked", user)
		s, err := downSecret(t, "sa-locked", "locked-creds")
		must(t, err)
		if string(s.Data["password"]) != "original" {
			t.Fatalf("the agent replaced sa-locked/locked-creds for a bundle whose account may not: %q", s.Data["password"])
		}
		deleteBD(t, "sa-locked")
	})

	t.Run("an object that is not a copy is not overwritten", func(t *testing.T) {
		createObjects(t, down.Client, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "unlabelled-creds", Namespace: "sa-ns"},
			StringData: map[string]string{"password": "original"},
		})
		createObjects(t, up.Client, upstreamSecret("unlabelled-creds", "from-tenant"))
		put(t, bundle{name: "sa-unlabelled", files: cm("sa-unlabelled"), opts: fleet.BundleDeploymentOptions{
			DefaultNamespace: "sa-ns", ServiceAccount: "deployer",
			DownstreamResources: []fleet.DownstreamResource{{Kind: "Secret", Name: "unlabelled-creds"}},
		}})
		waitDeployError(t, "sa-unlabelled", "sa-ns/unlabelled-creds already exists and is not a copy")
		s, err := downSecret(t, "sa-ns", "unlabelled-creds")
		must(t, err)
		if string(s.Data["password"]) != "original" || s.Labels[fleet.BundleDeploymentLabel] != "" {
			t.Fatalf("sa-ns/unlabelled-creds overwritten: %v %q", s.Labels, s.Data["password"])
		}
		deleteBD(t, "sa-unlabelled")
		// The BundleDeployment's clean-up does not take it for a copy.
		waitNoReleaseSecrets(t, "sa-ns", "sa-unlabelled")
		if _, err := downSecret(t, "sa-ns", "unlabelled-creds"); err != nil {
			t.Fatalf("clean-up deleted an object that was not a copy: %v", err)
		}
	})

	t.Run("a copy made as the account", func(t *testing.T) {
		createObjects(t, up.Client, upstreamSecret("sa-copy-creds", "from-tenant"))
		id := put(t, bundle{name: "sa-copy", files: cm("sa-copy"), opts: fleet.BundleDeploymentOptions{
			DefaultNamespace: "sa-ns", ServiceAccount: "deployer",
			DownstreamResources: []fleet.DownstreamResource{{Kind: "Secret", Name: "sa-copy-creds"}},
		}})
		waitState(t, "sa-copy", id, fleet.Ready)
		s, err := downSecret(t, "sa-ns", "sa-copy-creds")
		must(t, err)
		if string(s.Data["password"]) != "from-tenant" || s.Labels[fleet.BundleDeploymentLabel] != "sa-copy" {
			t.Fatalf("copy %v %q", s.Labels, s.Data["password"])
		}
		if len(s.ManagedFields) == 0 || s.ManagedFields[0].Manager != deployer.FieldManager {
			t.Fatalf("copy written by %+v", s.ManagedFields)
		}
		deleteBD(t, "sa-copy")
		eventually(t, "copy deleted with its bundle deployment", func() error {
			if _, err := downSecret(t, "sa-ns", "sa-copy-creds"); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there (err %v)", err)
			}
			return nil
		})
	})

	t.Run("valuesFrom a Secret the account may not read", func(t *testing.T) {
		createObjects(t, down.Client,
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sa-private"}},
			&corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "private-values", Namespace: "sa-private"},
				StringData: map[string]string{"values.yaml": "color: red\n"},
			})
		files := map[string]string{
			".chart/dddddddddddd/savf/Chart.yaml":        "apiVersion: v2\nname: savf\nversion: 0.1.0\n",
			".chart/dddddddddddd/savf/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: savf\ndata:\n  color: {{ .Values.color | quote }}\n",
		}
		put(t, bundle{name: "sa-vf", files: files, opts: fleet.BundleDeploymentOptions{
			DefaultNamespace: "sa-ns", ServiceAccount: "deployer",
			Helm: &fleet.HelmOptions{
				Chart:      ".chart/dddddddddddd/savf",
				ValuesFrom: []fleet.ValuesFrom{{SecretKeyRef: &fleet.SecretKeySelector{Name: "private-values", Namespace: "sa-private"}}},
			},
		}})
		if c := waitDeployError(t, "sa-vf", "valuesFrom secret private-values"); !strings.Contains(c.Message, user) {
			t.Fatalf("valuesFrom not read as %s: %s", user, c.Message)
		}
		if _, err := configMap(t, "sa-ns", "savf"); !apierrors.IsNotFound(err) {
			t.Fatalf("deployed with values the account may not read: %v", err)
		}
		deleteBD(t, "sa-vf")
	})

	t.Run("createNamespace false", func(t *testing.T) {
		createObjects(t, up.Client, upstreamSecret("nocreate-creds", "x"))
		no := false
		put(t, bundle{name: "nocreate", files: cm("nocreate"), opts: fleet.BundleDeploymentOptions{
			DefaultNamespace: "nocreate-ns", CreateNamespace: &no,
			DownstreamResources: []fleet.DownstreamResource{{Kind: "Secret", Name: "nocreate-creds"}},
		}})
		waitDeployError(t, "nocreate", `namespace "nocreate-ns" does not exist and createNamespace is false`)
		err := down.Client.Get(ctx, client.ObjectKey{Name: "nocreate-ns"}, &corev1.Namespace{})
		if !apierrors.IsNotFound(err) {
			t.Fatalf("namespace nocreate-ns created for downstreamResources despite createNamespace false (err %v)", err)
		}
		deleteBD(t, "nocreate")
	})
}

// Copies of downstreamResources are deleted when their entry leaves the
// list and when the BundleDeployment goes (the cluster is no longer
// targeted), unless keepResources, as in Rancher Fleet.
func TestDownstreamResourceCopiesRemoved(t *testing.T) {
	createObjects(t, up.Client, upstreamSecret("rm-a", "a"), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "rm-b", Namespace: clusterNS}, Data: map[string]string{"b": "b"},
	})
	b := bundle{name: "copyrm", files: map[string]string{"cm.yaml": cmFile("copyrm", "x")}, opts: fleet.BundleDeploymentOptions{
		DefaultNamespace:    "copyrm-ns",
		DownstreamResources: []fleet.DownstreamResource{{Kind: "Secret", Name: "rm-a"}, {Kind: "ConfigMap", Name: "rm-b"}},
	}}
	waitState(t, b.name, put(t, b), fleet.Ready)
	if _, err := configMap(t, "copyrm-ns", "rm-b"); err != nil {
		t.Fatal(err)
	}
	b.opts.DownstreamResources = b.opts.DownstreamResources[:1]
	waitState(t, b.name, put(t, b), fleet.Ready)
	wantGone(t, "copyrm-ns", "rm-b")
	if _, err := downSecret(t, "copyrm-ns", "rm-a"); err != nil {
		t.Fatalf("copy still listed was deleted: %v", err)
	}

	deleteBD(t, b.name)
	wantGone(t, "copyrm-ns", "copyrm")
	eventually(t, "copy deleted with its bundle deployment", func() error {
		if _, err := downSecret(t, "copyrm-ns", "rm-a"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (err %v)", err)
		}
		return nil
	})

	keep := bundle{name: "copykeep", files: map[string]string{"cm.yaml": cmFile("copykeep", "x")}, opts: fleet.BundleDeploymentOptions{
		DefaultNamespace: "copykeep-ns", KeepResources: true,
		DownstreamResources: []fleet.DownstreamResource{{Kind: "Secret", Name: "rm-a"}},
	}}
	waitState(t, keep.name, put(t, keep), fleet.Ready)
	deleteBD(t, keep.name)
	waitNoReleaseSecrets(t, "copykeep-ns", "copykeep")
	if _, err := downSecret(t, "copykeep-ns", "rm-a"); err != nil {
		t.Fatalf("keepResources: copy deleted: %v", err)
	}
}

// A release is removed as the service account that deployed it, which
// the release records, also by an agent that did not deploy it (here: a
// release of another process, its BundleDeployment gone, found by garbage
// collection). When that account may not delete the objects they stay and
// the release stays stored, to be retried; the agent never removes them
// with its own identity. Once the account may, the retry removes them.
func TestCleanupAsReleaseServiceAccount(t *testing.T) {
	ctx := context.Background()
	const ns, release = "cleaner-ns", "cleaner-gone"
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet-test-cleaner"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"*"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
		},
	}
	createObjects(t, down.Client,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNS}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "cleaner", Namespace: agentNS}},
		role,
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "cleaner", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "cleaner", Namespace: agentNS}},
		})
	// What an earlier agent process deployed for a BundleDeployment that
	// has been deleted since.
	earlier, err := deployer.New(down.Config, agentNS)
	must(t, err)
	// The API server's authorizer sees the new RoleBinding a moment after
	// it is stored: until then the account may not read the release
	// storage, and nothing is installed.
	eventually(t, "the first deploy as cleaner", func() error {
		_, err := earlier.Deploy(ctx, deployer.Input{Name: release, Manifest: configMaps("metadata:\n  name: cleaner-cm\n"),
			Options: fleet.BundleDeploymentOptions{DefaultNamespace: ns, ServiceAccount: "cleaner"}})
		if err != nil && !strings.Contains(err.Error(), "forbidden") {
			t.Fatalf("deploy as cleaner: %v", err)
		}
		return err
	})

	// Helm marks the release uninstalling before it deletes anything: the
	// running agent's garbage collection tried, as "cleaner", and failed.
	eventually(t, "an uninstall attempt that failed", func() error {
		l, err := down.Clientset.CoreV1().Secrets(ns).List(ctx, listOpts("owner=helm,name="+release))
		if err != nil {
			return err
		}
		for _, s := range l.Items {
			if s.Labels["status"] == "uninstalling" {
				return nil
			}
		}
		return fmt.Errorf("%d revisions, none uninstalling", len(l.Items))
	})
	cm, err := configMap(t, ns, "cleaner-cm")
	if err != nil || cm.DeletionTimestamp != nil {
		t.Fatalf("the agent deleted what the release's service account may not: %v %v", err, cm.DeletionTimestamp)
	}

	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		must(t, down.Client.Get(ctx, client.ObjectKeyFromObject(role), role))
		role.Rules[2].Verbs = append(role.Rules[2].Verbs, "delete")
		return down.Client.Update(ctx, role)
	}))
	wantGone(t, ns, "cleaner-cm")
	waitNoReleaseSecrets(t, ns, release)
}
