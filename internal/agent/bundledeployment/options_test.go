package bundledeployment_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
	"github.com/fleetgo/fleet/internal/agent/deployer"
	"github.com/fleetgo/fleet/internal/manifest"
)

// A chart that fails to render is ErrApplied with Helm's message, and the
// agent retries with backoff: the status is not rewritten in a loop.
func TestFailureIsErrAppliedWithBackoff(t *testing.T) {
	files := map[string]string{
		".chart/aaaaaaaaaaaa/bad/Chart.yaml":        "apiVersion: v2\nname: bad\nversion: 0.1.0\n",
		".chart/aaaaaaaaaaaa/bad/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ required \"value name is required\" .Values.name }}\n",
	}
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: "fail-ns", Helm: &fleet.HelmOptions{Chart: ".chart/aaaaaaaaaaaa/bad"}}
	put(t, bundle{name: "fail", files: files, opts: opts})
	var rv string
	eventually(t, "ErrApplied with Helm's message", func() error {
		bd := getBD(t, "fail")
		c := meta.FindStatusCondition(bd.Status.Conditions, fleet.ConditionDeployed)
		if bundledeployment.State(bd) != fleet.ErrApplied || c == nil || !strings.Contains(c.Message, "value name is required") {
			return fmt.Errorf("status %+v", bd.Status)
		}
		rv = bd.ResourceVersion
		return nil
	})
	// Over 8s the agent retries at most a couple of times (5s, 10s, ...),
	// and an unchanged error is not written again.
	time.Sleep(8 * time.Second)
	if bd := getBD(t, "fail"); bd.ResourceVersion != rv {
		t.Fatalf("status rewritten while failing: %s -> %s", rv, bd.ResourceVersion)
	}
	// Fixing the bundle (values) deploys it.
	opts.Helm.Values = &fleet.GenericMap{Data: map[string]any{"name": "fixed"}}
	id := put(t, bundle{name: "fail", files: files, opts: opts})
	waitState(t, "fail", id, fleet.Ready)
	wantData(t, "fail-ns", "fixed", "", "")
}

// Releases of this agent whose BundleDeployment does not exist (deleted
// while the agent was away) are garbage collected.
func TestGarbageCollection(t *testing.T) {
	ctx := context.Background()
	dep, err := deployer.New(down.Config, agentNS)
	must(t, err)
	m, err := manifest.New([]fleet.BundleResource{{Name: "cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: orphan\n"}})
	must(t, err)
	_, err = dep.Deploy(ctx, deployer.Input{Name: "never-existed", Manifest: m, Options: fleet.BundleDeploymentOptions{DefaultNamespace: "gc-ns"}})
	must(t, err)
	if _, err := configMap(t, "gc-ns", "orphan"); err != nil {
		t.Fatal(err)
	}
	wantGone(t, "gc-ns", "orphan")
}

// serviceAccount is impersonated: a bundle the account may not deploy
// fails with the API server's refusal, and succeeds once it may.
func TestServiceAccountImpersonation(t *testing.T) {
	ctx := context.Background()
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNS}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sa-ns"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: agentNS}},
	} {
		if err := down.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	id := put(t, bundle{
		name:  "sa",
		files: map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: as-sa\n"},
		opts:  fleet.BundleDeploymentOptions{DefaultNamespace: "sa-ns", ServiceAccount: "deployer"},
	})
	eventually(t, "forbidden for the service account", func() error {
		bd := getBD(t, "sa")
		c := meta.FindStatusCondition(bd.Status.Conditions, fleet.ConditionDeployed)
		if c == nil || !strings.Contains(c.Message, "system:serviceaccount:"+agentNS+":deployer") {
			return fmt.Errorf("status %+v", bd.Status.Conditions)
		}
		return nil
	})
	if _, err := configMap(t, "sa-ns", "as-sa"); !apierrors.IsNotFound(err) {
		t.Fatalf("deployed without permission: %v", err)
	}
	// Explicit rules: envtest has no controller aggregating admin/view.
	must(t, down.Client.Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet-test-deployer"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, Verbs: []string{"*"}},
		},
	}))
	must(t, down.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: "sa-ns"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "fleet-test-deployer"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "deployer", Namespace: agentNS}},
	}))
	// The backoff retries it (at most ~12s after the second failure).
	waitState(t, "sa", id, fleet.Ready)
	cm, err := configMap(t, "sa-ns", "as-sa")
	must(t, err)
	if cm.ManagedFields[0].Manager != deployer.FieldManager {
		t.Fatalf("managed by %q", cm.ManagedFields[0].Manager)
	}
	testDownstreamAsServiceAccount(t)
}

// downstreamResources are copied from the cluster namespace; valuesFrom is
// read downstream and, as in Rancher Fleet, overrides the bundle's values;
// namespaceLabels are set on the created namespace.
func TestDownstreamResourcesValuesFromAndNamespaceLabels(t *testing.T) {
	ctx := context.Background()
	must(t, up.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "db-creds", Namespace: clusterNS},
		StringData: map[string]string{"password": "s3cret"},
	}))
	must(t, down.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vf-src"}}))
	must(t, down.Client.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "local-values", Namespace: "vf-src"},
		Data:       map[string]string{"values.yaml": "region: eu-west\ncolor: from-cluster\n"},
	}))
	files := map[string]string{
		".chart/bbbbbbbbbbbb/vf/Chart.yaml":        "apiVersion: v2\nname: vf\nversion: 0.1.0\n",
		".chart/bbbbbbbbbbbb/vf/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: vf\ndata:\n  region: {{ .Values.region }}\n  color: {{ .Values.color }}\n",
	}
	id := put(t, bundle{name: "vf", files: files, opts: fleet.BundleDeploymentOptions{
		DefaultNamespace: "vf-ns",
		NamespaceLabels:  map[string]string{"team": "blue"},
		Helm: &fleet.HelmOptions{
			Chart:      ".chart/bbbbbbbbbbbb/vf",
			ValuesFrom: []fleet.ValuesFrom{{ConfigMapKeyRef: &fleet.ConfigMapKeySelector{Name: "local-values", Namespace: "vf-src"}}},
			Values:     &fleet.GenericMap{Data: map[string]any{"color": "from-bundle"}},
		},
		DownstreamResources: []fleet.DownstreamResource{{Kind: "Secret", Name: "db-creds"}},
	}})
	waitState(t, "vf", id, fleet.Ready)
	wantData(t, "vf-ns", "vf", "region", "eu-west")
	wantData(t, "vf-ns", "vf", "color", "from-cluster")
	s := &corev1.Secret{}
	must(t, down.Client.Get(ctx, client.ObjectKey{Namespace: "vf-ns", Name: "db-creds"}, s))
	if string(s.Data["password"]) != "s3cret" || s.Labels[fleet.BundleDeploymentLabel] != "vf" {
		t.Fatalf("copied secret %v %v", s.Labels, s.Data)
	}
	ns := &corev1.Namespace{}
	must(t, down.Client.Get(ctx, client.ObjectKey{Name: "vf-ns"}, ns))
	if ns.Labels["team"] != "blue" {
		t.Fatalf("namespace labels %v", ns.Labels)
	}
}

// timeoutSeconds makes Helm wait for readiness; with atomic a release that
// does not become ready in time is rolled back (uninstalled on install).
// No kubelet runs here, so the Deployment can never become ready.
func TestTimeoutAndAtomic(t *testing.T) {
	put(t, bundle{
		name:  "atomic",
		files: map[string]string{"d.yaml": deployment},
		opts:  fleet.BundleDeploymentOptions{DefaultNamespace: "atomic-ns", Helm: &fleet.HelmOptions{TimeoutSeconds: 3, Atomic: true}},
	})
	eventually(t, "ErrApplied after the timeout", func() error {
		bd := getBD(t, "atomic")
		c := meta.FindStatusCondition(bd.Status.Conditions, fleet.ConditionDeployed)
		if bundledeployment.State(bd) != fleet.ErrApplied || c == nil {
			return fmt.Errorf("status %+v", bd.Status.Conditions)
		}
		t.Logf("deploy error: %s", c.Message)
		return nil
	})
	eventually(t, "atomic install rolled back", func() error {
		err := down.Client.Get(context.Background(), client.ObjectKey{Namespace: "atomic-ns", Name: "app"}, &appsv1.Deployment{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("deployment still there (err %v)", err)
	})
	deleteBD(t, "atomic") // stop the retries
}

// Values read from a downstream Secret (valuesFrom) never reach the
// status: here the chart's values schema refuses the password, and Helm's
// message would quote it.
func TestSecretValuesNotInStatus(t *testing.T) {
	ctx := context.Background()
	const secretValue = "hunter2-not-digits"
	must(t, down.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "redact-src"}}))
	must(t, down.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "app-secrets", Namespace: "redact-src"},
		StringData: map[string]string{"values.yaml": "password: " + secretValue + "\n"},
	}))
	files := map[string]string{
		".chart/cccccccccccc/sv/Chart.yaml":         "apiVersion: v2\nname: sv\nversion: 0.1.0\n",
		".chart/cccccccccccc/sv/values.schema.json": `{"type":"object","properties":{"password":{"type":"string","pattern":"^[0-9]+$"}}}`,
		".chart/cccccccccccc/sv/templates/cm.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: sv\ndata:\n  set: \"yes\"\n",
	}
	put(t, bundle{name: "sv", files: files, opts: fleet.BundleDeploymentOptions{
		DefaultNamespace: "sv-ns",
		Helm: &fleet.HelmOptions{
			Chart:      ".chart/cccccccccccc/sv",
			ValuesFrom: []fleet.ValuesFrom{{SecretKeyRef: &fleet.SecretKeySelector{Name: "app-secrets", Namespace: "redact-src"}}},
		},
	}})
	eventually(t, "ErrApplied for the schema, without the value", func() error {
		bd := getBD(t, "sv")
		c := meta.FindStatusCondition(bd.Status.Conditions, fleet.ConditionDeployed)
		if bundledeployment.State(bd) != fleet.ErrApplied || c == nil || !strings.Contains(c.Message, "pattern") {
			return fmt.Errorf("status %+v", bd.Status)
		}
		for _, cond := range bd.Status.Conditions {
			if strings.Contains(cond.Message, secretValue) {
				t.Fatalf("condition %s quotes the Secret's value: %q", cond.Type, cond.Message)
			}
		}
		return nil
	})
}
