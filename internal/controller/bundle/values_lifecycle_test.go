package bundle_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
	"github.com/fleetgo/fleet/internal/controller/bundle"
)

// applyWithValues writes a bundle deploying to every cluster of ws with
// values as its Helm values, the way fleet apply and GitRepos write it:
// the values go to the bundle's values Secret.
func applyWithValues(t *testing.T, ctx context.Context, ws, name string, values map[string]interface{}) {
	t.Helper()
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name}}
	b.Spec.Resources = resources("kind: ConfigMap\n")
	b.Spec.Helm = &fleet.HelmOptions{Values: &fleet.GenericMap{Data: values}}
	b.Spec.Targets = []fleet.BundleTarget{{Name: "all", ClusterSelector: &metav1.LabelSelector{}}}
	must(t, apply.Apply(ctx, env.Client, []*fleet.Bundle{b}, apply.Options{Namespace: ws}))
}

// readyCondition returns the Ready condition of the bundle, nil if none.
func readyCondition(ctx context.Context, key client.ObjectKey) (*metav1.Condition, error) {
	b := &fleet.Bundle{}
	if err := env.Client.Get(ctx, key, b); err != nil {
		return nil, err
	}
	return meta.FindStatusCondition(b.Status.Conditions, fleet.ConditionReady), nil
}

// waitValuesOK waits until the bundle's status no longer reports a problem
// with its values.
func waitValuesOK(t *testing.T, ctx context.Context, key client.ObjectKey) {
	t.Helper()
	eventually(t, 30*time.Second, func() error {
		c, err := readyCondition(ctx, key)
		if err != nil {
			return err
		}
		if c == nil || c.Reason == bundle.ReasonValuesPending || c.Reason == bundle.ReasonInvalid {
			return fmt.Errorf("ready condition %+v", c)
		}
		return nil
	})
}

// deploymentIDs maps cluster → deployment ID of the bundle's deployments.
func deploymentIDs(t *testing.T, ctx context.Context, ws, name string) map[string]string {
	t.Helper()
	bds, err := bundleDeployments(ctx, ws, name)
	must(t, err)
	out := map[string]string{}
	for cl, bd := range bds {
		out[cl] = bd.Spec.DeploymentID
	}
	return out
}

// Without a garbage collector (the quickstart and envtest run none), a
// deleted Bundle's values Secret would stay forever, values included. The
// manager deletes it with the Bundle; a Secret of the bundle's name that
// the Bundle does not control (a user's) stays.
func TestValuesSecretGoesWithBundle(t *testing.T) {
	ctx := context.Background()
	ws := "ws-values-gone"
	createNamespace(t, ctx, ws, nil)
	newCluster(t, ctx, ws, "gc", map[string]string{"env": "dev"}, time.Second)
	applyWithValues(t, ctx, ws, "gone", map[string]interface{}{"password": "s3cret"})
	valuesOn(t, ctx, ws, "gone", map[string]map[string]interface{}{"gc": {"password": "s3cret"}})

	// A Bundle with its values in the spec, next to a user's Secret of its
	// name.
	users := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "kept"}, StringData: map[string]string{"token": "t0ken"}}
	must(t, env.Client.Create(ctx, users))
	kept := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "kept"}}
	kept.Spec.Resources = resources("kind: ConfigMap\n")
	kept.Spec.Targets = []fleet.BundleTarget{{Name: "all", ClusterSelector: &metav1.LabelSelector{}}}
	must(t, env.Client.Create(ctx, kept))
	eventually(t, 30*time.Second, func() error {
		if ids := deploymentIDs(t, ctx, ws, "kept"); len(ids) != 1 {
			return fmt.Errorf("deployments %v", ids)
		}
		return nil
	})

	for _, name := range []string{"gone", "kept"} {
		must(t, env.Client.Delete(ctx, &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name}}))
	}
	eventually(t, 60*time.Second, func() error {
		for _, name := range []string{"gone", "kept"} {
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ws, Name: name}, &fleet.Bundle{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("bundle %s: %v", name, err)
			}
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ws, Name: "gone"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("values Secret of the deleted bundle: %v", err)
		}
		return nil
	})
	sec := &corev1.Secret{}
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(users), sec))
	if string(sec.Data["token"]) != "t0ken" || sec.DeletionTimestamp != nil {
		t.Errorf("the user's Secret named like a deleted bundle was changed or deleted")
	}
}

// A values Secret whose Bundle is gone (deleted before the manager added
// its finalizer, or while no manager ran) is removed as the garbage
// collector would; one whose controller is a live Bundle, or that has no
// controller, is not.
func TestOrphanedValuesSecretRemoved(t *testing.T) {
	ctx := context.Background()
	ws := "ws-values-orphan"
	createNamespace(t, ctx, ws, nil)
	secret := func(name string, owner *metav1.OwnerReference) *corev1.Secret {
		sec := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name},
			Type:       fleet.SecretTypeBundleValues,
			Data:       map[string][]byte{apply.RootValuesKey: []byte(`{"password":"s3cret"}`)},
		}
		if owner != nil {
			sec.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		must(t, env.Client.Create(ctx, sec))
		return sec
	}
	ref := func(name string, uid types.UID) *metav1.OwnerReference {
		return &metav1.OwnerReference{APIVersion: fleet.GroupVersion.String(), Kind: "Bundle", Name: name, UID: uid, Controller: ptr(true)}
	}
	live := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "live"}}
	live.Spec.Resources = resources("kind: ConfigMap\n")
	must(t, env.Client.Create(ctx, live))
	secret("live", ref("live", live.UID))
	secret("unowned", nil)
	secret("orphan", ref("orphan", "0d1e7e7e-0000-4000-8000-000000000000"))

	eventually(t, 30*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ws, Name: "orphan"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("orphaned values Secret: %v", err)
		}
		return nil
	})
	for _, name := range []string{"live", "unowned"} {
		sec := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ws, Name: name}, sec); err != nil || sec.DeletionTimestamp != nil {
			t.Errorf("values Secret %s deleted: %v", name, err)
		}
	}
}

// A values Secret deleted under a deployed Bundle: the status says the
// values are missing, and what is deployed stays as it is (an input gone
// bad never undeploys); writing the values again resumes.
func TestValuesSecretLossKeepsDeployments(t *testing.T) {
	ctx := context.Background()
	ws := "ws-values-lost"
	createNamespace(t, ctx, ws, nil)
	newCluster(t, ctx, ws, "la", map[string]string{"env": "dev"}, time.Second)
	newCluster(t, ctx, ws, "lb", map[string]string{"env": "prod"}, time.Second)
	values := map[string]interface{}{"password": "s3cret"}
	applyWithValues(t, ctx, ws, "lost", values)
	valuesOn(t, ctx, ws, "lost", map[string]map[string]interface{}{"la": values, "lb": values})
	key := client.ObjectKey{Namespace: ws, Name: "lost"}
	waitValuesOK(t, ctx, key)
	before := deploymentIDs(t, ctx, ws, "lost")

	must(t, env.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "lost"}}))
	eventually(t, 30*time.Second, func() error {
		c, err := readyCondition(ctx, key)
		if err != nil {
			return err
		}
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != bundle.ReasonValuesPending || !strings.Contains(c.Message, "not found") {
			return fmt.Errorf("ready condition %+v", c)
		}
		return nil
	})
	// The pass that wrote this status has ended: it deleted nothing.
	if after := deploymentIDs(t, ctx, ws, "lost"); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("deployments changed while the values were missing: %v, were %v", after, before)
	}

	applyWithValues(t, ctx, ws, "lost", values)
	waitValuesOK(t, ctx, key)
	valuesOn(t, ctx, ws, "lost", map[string]map[string]interface{}{"la": values, "lb": values})
	if after := deploymentIDs(t, ctx, ws, "lost"); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("the same values written again changed the deployments: %v, were %v", after, before)
	}
}

// A values Secret whose hash matches but whose content is no JSON object
// (written by hand, or by a broken writer): the Bundle says so without
// quoting the content, keeps what is deployed, and is not retried in a
// loop; valid values resume it.
func TestValuesSecretBadJSON(t *testing.T) {
	ctx := context.Background()
	ws := "ws-values-bad"
	createNamespace(t, ctx, ws, nil)
	newCluster(t, ctx, ws, "ba", map[string]string{"env": "dev"}, time.Second)
	applyWithValues(t, ctx, ws, "bad", map[string]interface{}{"password": "s3cret"})
	valuesOn(t, ctx, ws, "bad", map[string]map[string]interface{}{"ba": {"password": "s3cret"}})
	key := client.ObjectKey{Namespace: ws, Name: "bad"}
	waitValuesOK(t, ctx, key)
	before := deploymentIDs(t, ctx, ws, "bad")

	// As a writer does: the Secret, then the hash on the Bundle.
	bad := map[string][]byte{apply.RootValuesKey: []byte(`password: s3cret-in-yaml`)}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "bad"}}
	update(t, ctx, sec, false, func() { sec.Data = bad })
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "bad"}}
	update(t, ctx, b, false, func() { b.Spec.ValuesHash = apply.HashValues(bad) })

	eventually(t, 30*time.Second, func() error {
		c, err := readyCondition(ctx, key)
		if err != nil {
			return err
		}
		if c == nil || c.Reason != bundle.ReasonInvalid || !strings.Contains(c.Message, "not a JSON object") || !strings.Contains(c.Message, apply.RootValuesKey) {
			return fmt.Errorf("ready condition %+v", c)
		}
		if strings.Contains(c.Message, "s3cret") {
			t.Fatalf("the status quotes the values: %q", c.Message)
		}
		return nil
	})
	if after := deploymentIDs(t, ctx, ws, "bad"); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("deployments changed on bad values: %v, were %v", after, before)
	}
	// Not retried in a loop: the Secret is not read again while nothing
	// changes.
	reads := bundle.ValuesSecretReads(key)
	consistently(t, 3*time.Second, func() error {
		if n := bundle.ValuesSecretReads(key); n != reads {
			return fmt.Errorf("values Secret read %d more times while nothing changed", n-reads)
		}
		return nil
	})

	// The Bundle names new values first (as Rancher Fleet's writers
	// order it): it waits for them, which is no stalled state any more.
	// (The other order keeps the verdict on the values the Bundle still
	// names until its hash follows.)
	good := map[string][]byte{apply.RootValuesKey: []byte(`{"password":"g00d"}`)}
	update(t, ctx, b, false, func() { b.Spec.ValuesHash = apply.HashValues(good) })
	eventually(t, 30*time.Second, func() error {
		got := &fleet.Bundle{}
		if err := env.Client.Get(ctx, key, got); err != nil {
			return err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, fleet.ConditionReady)
		if c == nil || c.Reason != bundle.ReasonValuesPending {
			return fmt.Errorf("ready condition %+v", c)
		}
		if s := meta.FindStatusCondition(got.Status.Conditions, fleet.ConditionStalled); s != nil {
			return fmt.Errorf("stalled while waiting for values: %+v", s)
		}
		return nil
	})
	update(t, ctx, sec, false, func() { sec.Data = good })
	waitValuesOK(t, ctx, key)
	valuesOn(t, ctx, ws, "bad", map[string]map[string]interface{}{"ba": {"password": "g00d"}})
}

// Every burst of deployment status reports reconciles the Bundle; those
// passes do not read its values Secret from the API server again. A
// change of the values is still picked up.
func TestValuesSecretNotReadOnStatusChanges(t *testing.T) {
	ctx := context.Background()
	ws := "ws-values-reads"
	createNamespace(t, ctx, ws, nil)
	newCluster(t, ctx, ws, "ra", map[string]string{"env": "dev"}, time.Second)
	newCluster(t, ctx, ws, "rb", map[string]string{"env": "prod"}, time.Second)
	values := map[string]interface{}{"password": "s3cret"}
	applyWithValues(t, ctx, ws, "reads", values)
	valuesOn(t, ctx, ws, "reads", map[string]map[string]interface{}{"ra": values, "rb": values})
	key := client.ObjectKey{Namespace: ws, Name: "reads"}
	waitValuesOK(t, ctx, key)

	readyCount := func(want int) {
		t.Helper()
		eventually(t, 30*time.Second, func() error {
			b := &fleet.Bundle{}
			if err := env.Client.Get(ctx, key, b); err != nil {
				return err
			}
			if b.Status.Summary.Ready != want {
				return fmt.Errorf("%d ready, want %d", b.Status.Summary.Ready, want)
			}
			return nil
		})
	}
	must(t, playAgents(ctx, ws, "reads", nil, nil))
	readyCount(2)
	reads := bundle.ValuesSecretReads(key)
	for i := 0; i < 3; i++ {
		must(t, playAgents(ctx, ws, "reads", map[string]bool{"ra": true}, nil))
		readyCount(1)
		must(t, playAgents(ctx, ws, "reads", nil, nil))
		readyCount(2)
	}
	if n := bundle.ValuesSecretReads(key) - reads; n != 0 {
		t.Errorf("the values Secret was read %d times over 6 status-only reconciles, want 0", n)
	}

	changed := map[string]interface{}{"password": "n3w"}
	applyWithValues(t, ctx, ws, "reads", changed)
	valuesOn(t, ctx, ws, "reads", map[string]map[string]interface{}{"ra": changed, "rb": changed})
}

// A Bundle and values Secret as Rancher Fleet's CLI writes them (the
// Bundle first, then the Secret it owns; valuesHash the sha256 of the
// Secret's data as JSON, computed here independently with sha256sum) are
// deployed with those values.
func TestValuesFromRancherWrittenSecret(t *testing.T) {
	ctx := context.Background()
	ws := "ws-values-rancher"
	createNamespace(t, ctx, ws, nil)
	newCluster(t, ctx, ws, "rd", map[string]string{"env": "dev"}, time.Second)
	newCluster(t, ctx, ws, "rp", map[string]string{"env": "prod"}, time.Second)
	// printf '{"prod":"eyJmb28iOiJiYXoifQ==","values.yaml":"eyJmb28iOiJiYXIifQ=="}' | sha256sum
	const hash = "3cc55da3efa28bea69ca6a636a97963197a7413cf5bd2ddf3fe2d4caa03131f3"
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "from-rancher", Labels: map[string]string{fleet.RepoLabel: "r"}}}
	b.Spec.Resources = resources("kind: ConfigMap\n")
	b.Spec.ValuesHash = hash
	b.Spec.Targets = []fleet.BundleTarget{
		{Name: "prod", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}},
		{Name: "target001", ClusterSelector: &metav1.LabelSelector{}},
	}
	must(t, env.Client.Create(ctx, b))
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: b.Name, Labels: b.Labels, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "fleet.cattle.io/v1alpha1", Kind: "Bundle", Name: b.Name, UID: b.UID, Controller: ptr(true), BlockOwnerDeletion: ptr(true),
		}}},
		Type: "fleet.cattle.io/bundle-values/v1alpha1",
		Data: map[string][]byte{"values.yaml": []byte(`{"foo":"bar"}`), "prod": []byte(`{"foo":"baz"}`)},
	}
	must(t, env.Client.Create(ctx, sec))
	valuesOn(t, ctx, ws, "from-rancher", map[string]map[string]interface{}{"rd": {"foo": "bar"}, "rp": {"foo": "baz"}})
	waitValuesOK(t, ctx, client.ObjectKeyFromObject(b))
}
