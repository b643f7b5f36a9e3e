package deployer

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// An upgrade adopts no object that someone else keeps: the release
// namespace the agent created (listed as a kind: Namespace; uninstalling
// the release would delete it and every other release in it), another
// BundleDeployment's downstreamResources copy, an object a controller
// owns. Each is refused, naming helm.takeOwnership, and left as it was;
// with takeOwnership the namespace is adopted.
func TestUpgradeRefusesObjectsOthersKeep(t *testing.T) {
	ctx := context.Background()
	down := downstream(t)
	d := newTestDeployer(t)
	const ns = "adopt-guard"
	core := down.Clientset.CoreV1()
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns}
	base := map[string]string{"a.yaml": cmYAML("a", "1")}
	if _, err := deployFiles(t, d, "guarded", base, opts); err != nil {
		t.Fatalf("install: %v", err)
	}
	if _, err := deployFiles(t, d, "neighbour", map[string]string{"n.yaml": cmYAML("neighbour-cm", "1")},
		fleet.BundleDeploymentOptions{DefaultNamespace: ns, Helm: &fleet.HelmOptions{ReleaseName: "neighbour"}}); err != nil {
		t.Fatalf("install neighbour: %v", err)
	}
	nsBefore, err := core.Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A copy the agent made for another BundleDeployment (copyObject).
	if _, err := core.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "their-copy", Labels: map[string]string{fleet.BundleDeploymentLabel: "other-bd"},
		Annotations: map[string]string{fleet.KeepResourcesAnnotation: "false"},
	}, Data: map[string]string{"x": "copy"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	owner, err := core.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	if _, err := core.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "controlled", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: &yes,
		}},
	}, Data: map[string]string{"x": "controller"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	nsYAML := "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + ns + "\n  labels:\n    team: blue\n"
	for _, c := range []struct {
		name, file, want string
	}{
		{name: "namespace", file: nsYAML,
			want: "Namespace " + ns + " exists and cannot be imported into the current release: it carries no Helm release ownership and is cluster-scoped"},
		{name: "copy", file: cmYAML("their-copy", "bundle"),
			want: "ConfigMap " + ns + "/their-copy exists and cannot be imported into the current release: it is labelled fleet.cattle.io/bundledeployment=other-bd"},
		{name: "controlled", file: cmYAML("controlled", "bundle"),
			want: "ConfigMap " + ns + "/controlled exists and cannot be imported into the current release: it is controlled by ConfigMap owner"},
	} {
		files := map[string]string{"a.yaml": cmYAML("a", "1"), "new.yaml": c.file}
		_, err := deployFiles(t, d, "guarded", files, opts)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "set helm.takeOwnership to adopt it") {
			t.Fatalf("upgrade adding the %s: err = %v, want it to contain %q and name helm.takeOwnership", c.name, err, c.want)
		}
	}
	nsAfter, err := core.Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil || nsAfter.UID != nsBefore.UID || nsAfter.Labels["team"] != "" || nsAfter.Labels[managedByLabel] != "" ||
		nsAfter.Annotations[releaseNameAnnotation] != "" {
		t.Fatalf("namespace after the refused upgrade: uid %s labels %v annotations %v (err %v), want it untouched",
			nsAfter.UID, nsAfter.Labels, nsAfter.Annotations, err)
	}
	for name, x := range map[string]string{"their-copy": "copy", "controlled": "controller"} {
		cm, err := core.ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || cm.Data["x"] != x || cm.Labels[managedByLabel] != "" || cm.Annotations[releaseNameAnnotation] != "" {
			t.Fatalf("%s after the refused upgrade: data %v labels %v annotations %v (err %v), want untouched",
				name, cm.Data, cm.Labels, cm.Annotations, err)
		}
	}
	if _, err := core.ConfigMaps(ns).Get(ctx, "neighbour-cm", metav1.GetOptions{}); err != nil {
		t.Fatalf("the neighbour release's object: %v", err)
	}
	list, err := core.Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=neighbour"})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("neighbour's stored revisions: %d (err %v), want 1", len(list.Items), err)
	}

	// helm.takeOwnership adopts the namespace, keeping it (same UID).
	take := fleet.BundleDeploymentOptions{DefaultNamespace: ns, Helm: &fleet.HelmOptions{TakeOwnership: true}}
	if _, err := deployFiles(t, d, "guarded", map[string]string{"a.yaml": cmYAML("a", "1"), "ns.yaml": nsYAML}, take); err != nil {
		t.Fatalf("upgrade adding the namespace with takeOwnership: %v", err)
	}
	nsAfter, err = core.Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil || nsAfter.UID != nsBefore.UID || nsAfter.Labels["team"] != "blue" ||
		nsAfter.Annotations[releaseNameAnnotation] != "guarded" || nsAfter.Annotations[releaseNSAnnotation] != ns {
		t.Fatalf("namespace with takeOwnership: uid %s labels %v annotations %v (err %v); want uid %s, team=blue, owned by guarded",
			nsAfter.UID, nsAfter.Labels, nsAfter.Annotations, err, nsBefore.UID)
	}
}

// Renaming a release whose new revision cannot be stored (an admission
// policy refuses its storage Secret, as a quota would): the objects
// adopted for the new release get their old ownership back, so the old
// release's uninstall still removes them instead of leaving them behind,
// naming a release that does not exist.
func TestRenameUnmarksWhenNothingIsStored(t *testing.T) {
	for i, c := range []struct {
		name    string
		timeout int
	}{
		// Helm applies, then fails to record (its pending revision held).
		{name: "applied, not recorded"},
		// Helm fails to store its pending revision, before applying.
		{name: "refused before applying", timeout: 60},
	} {
		t.Run(c.name, func(t *testing.T) { renameUnstored(t, fmt.Sprintf("rename-unmark-%d", i), c.timeout) })
	}
}

func renameUnstored(t *testing.T, ns string, timeout int) {
	ctx := context.Background()
	down := downstream(t)
	d := newTestDeployer(t)
	core := down.Clientset.CoreV1()
	opts := func(release string) fleet.BundleDeploymentOptions {
		return fleet.BundleDeploymentOptions{DefaultNamespace: ns, Helm: &fleet.HelmOptions{ReleaseName: release, TimeoutSeconds: timeout}}
	}
	if _, err := deployFiles(t, d, "unmarker", map[string]string{"cm.yaml": cmYAML("fixed", "1")}, opts("one")); err != nil {
		t.Fatalf("deploy as one: %v", err)
	}
	before, err := core.ConfigMaps(ns).Get(ctx, "fixed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lift := refuseStorage(t, ns, "two")
	_, err = deployFiles(t, d, "unmarker", map[string]string{"cm.yaml": cmYAML("fixed", "2")}, opts("two"))
	if err == nil || !strings.Contains(err.Error(), storageRefused) {
		t.Fatalf("deploy as two with storage refused: err = %v, want the refusal", err)
	}
	cm, err := core.ConfigMaps(ns).Get(ctx, "fixed", metav1.GetOptions{})
	if err != nil || cm.UID != before.UID || cm.Annotations[releaseNameAnnotation] != "one" ||
		cm.Annotations[releaseNSAnnotation] != ns || cm.Labels[managedByLabel] != "Helm" {
		t.Fatalf("fixed after the failed rename: labels %v annotations %v (err %v), want owned by one again",
			cm.Labels, cm.Annotations, err)
	}
	list, err := core.Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=two"})
	if err != nil || len(list.Items) != 0 {
		t.Fatalf("release two stored: %d (err %v), want none", len(list.Items), err)
	}

	lift()
	if err := d.Uninstall(ctx, UninstallInput{ReleaseName: "one", Namespace: ns, BundleDeployment: "unmarker"}); err != nil {
		t.Fatalf("uninstall one: %v", err)
	}
	if _, err := core.ConfigMaps(ns).Get(ctx, "fixed", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("fixed after one's uninstall: err = %v, want NotFound (not left behind)", err)
	}
}

const storageRefused = "release storage refused for this test"

// refuseStorage makes the API server refuse to create the storage Secrets
// of release ns/name, until the returned function lifts the refusal. It
// returns once the refusal is in force.
func refuseStorage(t *testing.T, ns, name string) (lift func()) {
	t.Helper()
	ctx := context.Background()
	adm := downstream(t).Clientset.AdmissionregistrationV1()
	policyName := "refuse-storage-" + ns
	prefix := "sh.helm.release.v1." + name + "."
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: policyName},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"secrets"}},
				},
			}}},
			Validations: []admissionv1.Validation{{
				Expression: fmt.Sprintf("request.namespace != '%s' || !object.metadata.name.startsWith('%s')", ns, prefix),
				Message:    storageRefused,
			}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policyName},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policyName,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}
	if _, err := adm.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lifted := false
	lift = func() {
		if lifted {
			return
		}
		lifted = true
		_ = adm.ValidatingAdmissionPolicyBindings().Delete(ctx, policyName, metav1.DeleteOptions{})
		_ = adm.ValidatingAdmissionPolicies().Delete(ctx, policyName, metav1.DeleteOptions{})
		// Lifted once a write of the same name goes through again.
		probeStorage(t, ns, prefix, func(err error) error {
			if err != nil {
				return fmt.Errorf("refusal still in force (%v)", err)
			}
			return nil
		})
	}
	t.Cleanup(lift)
	probeStorage(t, ns, prefix, func(err error) error {
		if err == nil || !strings.Contains(err.Error(), storageRefused) {
			return fmt.Errorf("refusal not in force yet (%v)", err)
		}
		return nil
	})
	return lift
}

// probeStorage waits until ok accepts the result of a dry-run create of
// a Secret named prefix+"probe" in ns.
func probeStorage(t *testing.T, ns, prefix string, ok func(error) error) {
	t.Helper()
	secrets := downstream(t).Clientset.CoreV1().Secrets(ns)
	probe := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: prefix + "probe"}}
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := secrets.Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		last = ok(err)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("probing storage Secrets of %s: %v", ns, last)
	}
}
