package bundledeployment_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	rcommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
)

func createNS(t *testing.T, name string) {
	t.Helper()
	err := down.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// deployedCondition waits until the Deployed condition is False with a
// message containing want (the state being ErrApplied).
func waitDeployError(t *testing.T, name, want string) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	eventually(t, name+" ErrApplied with "+want, func() error {
		bd := getBD(t, name)
		c = meta.FindStatusCondition(bd.Status.Conditions, fleet.ConditionDeployed)
		if bundledeployment.State(bd) != fleet.ErrApplied || c == nil || !strings.Contains(c.Message, want) {
			return fmt.Errorf("state %s, deployed %+v", bundledeployment.State(bd), c)
		}
		return nil
	})
	return c
}

// helm.takeOwnership: an object that exists downstream without Helm's
// ownership metadata is not adopted by default (ErrApplied with Helm's
// message, the object untouched), and is adopted once takeOwnership is set.
func TestTakeOwnership(t *testing.T) {
	ctx := context.Background()
	createNS(t, "own-ns")
	must(t, down.Client.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "preexisting", Namespace: "own-ns"},
		Data:       map[string]string{"a": "by-hand"},
	}))
	b := bundle{
		name:  "own",
		files: map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: preexisting\ndata:\n  a: from-bundle\n"},
		opts:  fleet.BundleDeploymentOptions{DefaultNamespace: "own-ns"},
	}
	put(t, b)
	c := waitDeployError(t, "own", "exists and cannot be imported into the current release")
	t.Logf("without takeOwnership: %s", c.Message)
	wantData(t, "own-ns", "preexisting", "a", "by-hand")

	b.opts.Helm = &fleet.HelmOptions{TakeOwnership: true}
	id := put(t, b)
	waitState(t, "own", id, fleet.Ready)
	wantData(t, "own-ns", "preexisting", "a", "from-bundle")
	cm, err := configMap(t, "own-ns", "preexisting")
	must(t, err)
	if cm.Annotations["meta.helm.sh/release-name"] != "own" || cm.Labels["app.kubernetes.io/managed-by"] != "Helm" {
		t.Fatalf("not adopted: labels %v annotations %v", cm.Labels, cm.Annotations)
	}
}

const job = `apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: c
        image: registry.example/migrate:1
`

// helm.waitForJobs (with timeoutSeconds): the deployment is not reported
// applied until the bundle's Job completes. No kubelet or job controller
// runs in the test cluster, so the test patches the Job's status to
// complete itself, standing in for them.
func TestWaitForJobs(t *testing.T) {
	ctx := context.Background()
	id := put(t, bundle{
		name:  "jobs",
		files: map[string]string{"job.yaml": job},
		opts:  fleet.BundleDeploymentOptions{DefaultNamespace: "jobs-ns", Helm: &fleet.HelmOptions{TimeoutSeconds: 300, WaitForJobs: true}},
	})
	j := &batchv1.Job{}
	eventually(t, "job created", func() error {
		return down.Client.Get(ctx, client.ObjectKey{Namespace: "jobs-ns", Name: "migrate"}, j)
	})
	// Helm is waiting for the Job: nothing is reported applied meanwhile.
	time.Sleep(3 * time.Second)
	if bd := getBD(t, "jobs"); bd.Status.AppliedDeploymentID == id {
		t.Fatalf("reported applied before the job completed: %+v", bd.Status.Conditions)
	}
	// Stand in for the job controller: the Job succeeded.
	must(t, down.Client.Get(ctx, client.ObjectKeyFromObject(j), j))
	now := metav1.Now()
	j.Status.StartTime = &now
	j.Status.CompletionTime = &now
	j.Status.Succeeded = 1
	j.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	must(t, down.Client.Status().Update(ctx, j))
	bd := waitState(t, "jobs", id, fleet.Ready)
	if !meta.IsStatusConditionTrue(bd.Status.Conditions, fleet.ConditionDeployed) {
		t.Fatalf("deployed condition %+v", bd.Status.Conditions)
	}
}

// releaseHistory lists a release's revisions with their statuses, oldest
// first, read from Helm's storage Secrets.
func releaseHistory(t *testing.T, ns, name string) []*release.Release {
	t.Helper()
	rels, err := driver.NewSecrets(down.Clientset.CoreV1().Secrets(ns)).Query(map[string]string{"name": name, "owner": "helm"})
	if err != nil && !strings.Contains(err.Error(), "not found") {
		t.Fatal(err)
	}
	var out []*release.Release
	for _, r := range rels {
		v, ok := r.(*release.Release)
		if !ok {
			t.Fatalf("release type %T", r)
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out
}

func historyString(rels []*release.Release) string {
	var parts []string
	for _, r := range rels {
		parts = append(parts, fmt.Sprintf("v%d=%s", r.Version, r.Info.Status))
	}
	return strings.Join(parts, ",")
}

// correctDrift.keepFailHistory: a drift-correcting rollback that fails
// (here an admission policy refuses to restore the ConfigMap) leaves a
// failed revision in the release history only when keepFailHistory is set;
// otherwise the history is as before the attempt. Once the refusal is
// gone, the drift is corrected in both cases.
func TestCorrectDriftKeepFailHistory(t *testing.T) {
	ctx := context.Background()
	guarded := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: guarded\ndata:\n  a: \"1\"\n"
	idOff := put(t, bundle{name: "kfh-off", files: map[string]string{"cm.yaml": guarded},
		opts: fleet.BundleDeploymentOptions{DefaultNamespace: "kfh-off-ns"}, correctDrift: &fleet.CorrectDrift{Enabled: true}})
	idOn := put(t, bundle{name: "kfh-on", files: map[string]string{"cm.yaml": guarded},
		opts: fleet.BundleDeploymentOptions{DefaultNamespace: "kfh-on-ns"}, correctDrift: &fleet.CorrectDrift{Enabled: true, KeepFailHistory: true}})
	waitState(t, "kfh-off", idOff, fleet.Ready)
	waitState(t, "kfh-on", idOn, fleet.Ready)

	// Refuse any write that sets guarded's a back to "1".
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-restore"},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				},
			}}},
			Validations: []admissionv1.Validation{{
				Expression: `object.metadata.name != "guarded" || !has(object.data) || !("a" in object.data) || object.data["a"] != "1"`,
				Message:    "guarded may not be restored",
			}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "no-restore"},
		Spec:       admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "no-restore", ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}
	must(t, down.Client.Create(ctx, policy))
	must(t, down.Client.Create(ctx, binding))
	defer func() {
		_ = down.Client.Delete(ctx, binding)
		_ = down.Client.Delete(ctx, policy)
	}()
	eventually(t, "policy in force", func() error {
		cm, err := configMap(t, "kfh-off-ns", "guarded")
		if err != nil {
			return err
		}
		cm.Data["a"] = "1"
		err = down.Client.Update(ctx, cm, client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), "may not be restored") {
			return fmt.Errorf("dry-run update allowed (%v)", err)
		}
		return nil
	})
	offV1 := releaseHistory(t, "kfh-off-ns", "kfh-off")
	if historyString(offV1) != "v1=deployed" {
		t.Fatalf("history before drift: %s", historyString(offV1))
	}
	secretName := "sh.helm.release.v1.kfh-off.v1"
	before := &corev1.Secret{}
	must(t, down.Client.Get(ctx, client.ObjectKey{Namespace: "kfh-off-ns", Name: secretName}, before))

	for _, ns := range []string{"kfh-off-ns", "kfh-on-ns"} {
		cm, err := configMap(t, ns, "guarded")
		must(t, err)
		cm.Data["a"] = "2"
		must(t, down.Client.Update(ctx, cm))
	}

	// keepFailHistory: the failed rollback stays in the history.
	eventually(t, "failed rollback kept", func() error {
		h := releaseHistory(t, "kfh-on-ns", "kfh-on")
		for _, r := range h {
			if r.Info.Status == rcommon.StatusFailed && strings.Contains(r.Info.Description, "may not be restored") {
				return nil
			}
		}
		return fmt.Errorf("history %s", historyString(h))
	})
	// Without it: the attempt happened (revision 1 was marked superseded
	// and then deployed again, so its Secret changed) but left nothing.
	eventually(t, "failed rollback removed", func() error {
		s := &corev1.Secret{}
		if err := down.Client.Get(ctx, client.ObjectKey{Namespace: "kfh-off-ns", Name: secretName}, s); err != nil {
			return err
		}
		h := releaseHistory(t, "kfh-off-ns", "kfh-off")
		if s.ResourceVersion == before.ResourceVersion || historyString(h) != "v1=deployed" {
			return fmt.Errorf("secret rv %s (was %s), history %s", s.ResourceVersion, before.ResourceVersion, historyString(h))
		}
		return nil
	})
	for _, name := range []string{"kfh-off", "kfh-on"} {
		if s := bundledeployment.State(getBD(t, name)); s != fleet.Modified {
			t.Fatalf("%s: state %s while correction is refused", name, s)
		}
	}

	// The refusal goes: both are corrected (keepFailHistory included,
	// although its history has no deployed revision left).
	must(t, down.Client.Delete(ctx, binding))
	must(t, down.Client.Delete(ctx, policy))
	wantData(t, "kfh-off-ns", "guarded", "a", "1")
	wantData(t, "kfh-on-ns", "guarded", "a", "1")
	waitState(t, "kfh-off", idOff, fleet.Ready)
	waitState(t, "kfh-on", idOn, fleet.Ready)
}

// A release left pending (the agent or Helm killed mid-upgrade: simulated
// by marking the last revision pending-upgrade in Helm's storage) does not
// block the agent with Helm's "another operation (install/upgrade/rollback)
// is in progress": the next deployment upgrades over it.
func TestPendingReleaseRecovered(t *testing.T) {
	b := bundle{name: "pending", files: map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: pend\ndata:\n  a: \"1\"\n"},
		opts: fleet.BundleDeploymentOptions{DefaultNamespace: "pending-ns"}}
	id := put(t, b)
	waitState(t, "pending", id, fleet.Ready)

	store := driver.NewSecrets(down.Clientset.CoreV1().Secrets("pending-ns"))
	key := "sh.helm.release.v1.pending.v1"
	r, err := store.Get(key)
	must(t, err)
	rel := r.(*release.Release)
	rel.Info.Status = rcommon.StatusPendingUpgrade
	must(t, store.Update(key, rel))

	b.files["cm.yaml"] = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: pend\ndata:\n  a: \"2\"\n"
	id2 := put(t, b)
	waitState(t, "pending", id2, fleet.Ready)
	wantData(t, "pending-ns", "pend", "a", "2")
	h := releaseHistory(t, "pending-ns", "pending")
	if last := h[len(h)-1]; last.Info.Status != rcommon.StatusDeployed {
		t.Fatalf("history %s", historyString(h))
	}

	// A first install left pending-install is started over, too.
	b2 := bundle{name: "pending-install", files: map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: pend-i\n"},
		opts: fleet.BundleDeploymentOptions{DefaultNamespace: "pending-ns"}}
	id3 := put(t, b2)
	waitState(t, "pending-install", id3, fleet.Ready)
	key = "sh.helm.release.v1.pending-install.v1"
	r, err = store.Get(key)
	must(t, err)
	rel = r.(*release.Release)
	rel.Info.Status = rcommon.StatusPendingInstall
	must(t, store.Update(key, rel))
	b2.files["cm.yaml"] = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: pend-i\ndata:\n  b: x\n"
	id4 := put(t, b2)
	waitState(t, "pending-install", id4, fleet.Ready)
	wantData(t, "pending-ns", "pend-i", "b", "x")
}

func ptr[T any](v T) *T { return &v }

// When the manager bumps spec.downstreamResourcesGeneration (a copied
// Secret changed upstream), the agent redeploys the same deploymentID and
// the downstream copy follows; status.downstreamResourcesGeneration reports
// it.
func TestDownstreamResourcesGenerationRedeploys(t *testing.T) {
	ctx := context.Background()
	src := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "gen-creds", Namespace: clusterNS},
		StringData: map[string]string{"password": "one"},
	}
	must(t, up.Client.Create(ctx, src))
	id := put(t, bundle{name: "drgen", files: map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: drgen\n"},
		opts: fleet.BundleDeploymentOptions{DefaultNamespace: "drgen-ns", DownstreamResources: []fleet.DownstreamResource{{Kind: "Secret", Name: "gen-creds"}}}})
	waitState(t, "drgen", id, fleet.Ready)
	password := func() (string, error) {
		s := &corev1.Secret{}
		err := down.Client.Get(ctx, client.ObjectKey{Namespace: "drgen-ns", Name: "gen-creds"}, s)
		return string(s.Data["password"]), err
	}
	if p, err := password(); err != nil || p != "one" {
		t.Fatalf("copy %q %v", p, err)
	}
	// What the manager does when the source changes: update the copy in
	// the cluster namespace and bump the generation.
	must(t, up.Client.Get(ctx, client.ObjectKeyFromObject(src), src))
	src.Data["password"] = []byte("two")
	must(t, up.Client.Update(ctx, src))
	var bd *fleet.BundleDeployment
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		bd = getBD(t, "drgen")
		bd.Spec.DownstreamResourcesGeneration++
		return up.Client.Update(ctx, bd)
	}))
	eventually(t, "copy updated downstream", func() error {
		p, err := password()
		if err != nil || p != "two" {
			return fmt.Errorf("copy %q %v", p, err)
		}
		if g := getBD(t, "drgen").Status.DownstreamResourcesGeneration; g != bd.Spec.DownstreamResourcesGeneration {
			return fmt.Errorf("status generation %d", g)
		}
		return nil
	})
	waitState(t, "drgen", id, fleet.Ready)
}

// Pausing a BundleDeployment drops its drift watch (as Fleet does) and
// nothing is reported while paused; resuming watches the deployed release
// again and reports what drifted meanwhile.
func TestPausedClearsDriftWatch(t *testing.T) {
	ctx := context.Background()
	id := put(t, bundle{name: "paused", files: map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: pz\ndata:\n  a: \"1\"\n"},
		opts: fleet.BundleDeploymentOptions{DefaultNamespace: "paused-ns"}})
	waitState(t, "paused", id, fleet.Ready)
	if n := bundledeployment.WatchedObjects(clusterNS, "paused"); n != 1 {
		t.Fatalf("watching %d objects, want 1", n)
	}
	setPaused := func(p bool) {
		must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			bd := getBD(t, "paused")
			bd.Spec.Paused = p
			return up.Client.Update(ctx, bd)
		}))
	}
	setPaused(true)
	eventually(t, "drift watch dropped", func() error {
		if n := bundledeployment.WatchedObjects(clusterNS, "paused"); n != 0 {
			return fmt.Errorf("still watching %d objects", n)
		}
		return nil
	})
	cm, err := configMap(t, "paused-ns", "pz")
	must(t, err)
	cm.Data["a"] = "2"
	must(t, down.Client.Update(ctx, cm))
	time.Sleep(2 * time.Second)
	if s := bundledeployment.State(getBD(t, "paused")); s != fleet.Ready {
		t.Fatalf("paused bundle reported %s", s)
	}
	setPaused(false)
	waitState(t, "paused", id, fleet.Modified)
	if n := bundledeployment.WatchedObjects(clusterNS, "paused"); n != 1 {
		t.Fatalf("watching %d objects after resume, want 1", n)
	}
}
