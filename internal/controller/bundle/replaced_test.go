package bundle_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
	"github.com/fleetgo/fleet/internal/controller/bundle"
	"github.com/fleetgo/fleet/internal/testenv"
)

// TestStaleCacheSparesReplacedBundle: a Bundle deleted and created again
// under its name while the manager's cache still shows the old one (being
// deleted) or shows neither. Whatever the cache says, the new Bundle's
// deployments, their values Secrets, its own values Secret and its
// finalizer all stay: deleting them would make every agent uninstall the
// workload and install it again.
//
// The reconciler under test reads Bundles through a client that answers
// as the lagging cache would and deployments from a cache of its own (in
// sync); the package's running controllers keep the new Bundle deployed.
func TestStaleCacheSparesReplacedBundle(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ws := "ws-replaced"
	createNamespace(t, ctx, ws, nil)
	newCluster(t, ctx, ws, "rp", nil, time.Second)

	live, err := client.NewWithWatch(env.Config, client.Options{Scheme: testenv.Scheme})
	must(t, err)
	objs := startDeploymentCache(t, ctx)

	for _, tc := range []struct {
		name   string
		deploy bool
		// cacheGone: the cache shows no Bundle of the name at all.
		cacheGone bool
		// checkRaced: the check that the old Bundle still exists ran
		// just before it went and the new one came.
		checkRaced bool
	}{
		{name: "deleting, deployed", deploy: true},
		{name: "deleting, nothing deployed"},
		{name: "replaced after the check", checkRaced: true},
		{name: "gone from the cache, deployed", deploy: true, cacheGone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("re%d", time.Now().UnixNano()%1e9)
			key := types.NamespacedName{Namespace: ws, Name: name}
			stale := replaceBundle(t, ctx, key, tc.deploy)
			before := snapshot(t, ctx, key)
			if strings.Contains(before, "not found") || tc.deploy != strings.Contains(before, "deployment on rp") {
				t.Fatalf("the new Bundle is not set up as it should: %s", before)
			}
			// The reconciler's deployment cache shows the new Bundle's.
			eventually(t, 30*time.Second, func() error { return cacheInSync(ctx, objs, key) })

			var cached *fleet.Bundle
			if !tc.cacheGone {
				cached = stale
			}
			reader := client.Reader(live)
			if tc.checkRaced {
				reader = oldStillThere(live, key, stale.UID)
			}
			r := bundle.NewReconcilerForTest(laggingClient(live, key, cached), reader, objs)
			var res ctrl.Result
			for range 3 {
				if res, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
					t.Fatalf("reconcile: %v", err)
				}
				if res.RequeueAfter == 0 {
					break
				}
				eventually(t, 30*time.Second, func() error { return cacheInSync(ctx, objs, key) })
			}
			if res.RequeueAfter == 0 {
				t.Errorf("the name was not looked at again (result %+v)", res)
			}
			if after := snapshot(t, ctx, key); after != before {
				t.Errorf("the new Bundle's objects changed:\n got %s\nwant %s", after, before)
			}
		})
	}
}

// replaceBundle creates a Bundle, lets the manager add its finalizer,
// deletes it and creates a new one of the same name with Helm values
// (hence a values Secret) deployed to every cluster of the namespace when
// deploy is set, to none otherwise. It returns the old Bundle as a lagging
// cache still shows it: marked for deletion, finalizer still on.
func replaceBundle(t *testing.T, ctx context.Context, key types.NamespacedName, deploy bool) *fleet.Bundle {
	t.Helper()
	old := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	old.Spec.Resources = resources("kind: ConfigMap\n")
	must(t, env.Client.Create(ctx, old))
	waitFinalizer(t, ctx, key, old)
	stale := old.DeepCopy()
	stale.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	must(t, env.Client.Delete(ctx, old))
	eventually(t, 30*time.Second, func() error {
		if err := env.Client.Get(ctx, key, &fleet.Bundle{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("old Bundle still there (%v)", err)
		}
		return nil
	})

	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	b.Spec.Resources = resources("kind: ConfigMap\n")
	b.Spec.Helm = &fleet.HelmOptions{Values: &fleet.GenericMap{Data: map[string]interface{}{"password": "s3cret"}}}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"no-such": "cluster"}}
	if deploy {
		sel = &metav1.LabelSelector{}
	}
	b.Spec.Targets = []fleet.BundleTarget{{Name: "t", ClusterSelector: sel}}
	must(t, apply.Apply(ctx, env.Client, []*fleet.Bundle{b}, apply.Options{Namespace: key.Namespace}))
	cur := &fleet.Bundle{}
	waitFinalizer(t, ctx, key, cur)
	if cur.UID == stale.UID {
		t.Fatal("the new Bundle has the old one's UID")
	}
	if deploy {
		valuesOn(t, ctx, key.Namespace, key.Name, map[string]map[string]interface{}{"rp": {"password": "s3cret"}})
	}
	return stale
}

func waitFinalizer(t *testing.T, ctx context.Context, key types.NamespacedName, b *fleet.Bundle) {
	t.Helper()
	eventually(t, 30*time.Second, func() error {
		if err := env.Client.Get(ctx, key, b); err != nil {
			return err
		}
		if len(b.Finalizers) == 0 {
			return fmt.Errorf("no finalizer yet")
		}
		return nil
	})
}

// snapshot is what a user sees of the Bundle key: its UID and finalizers,
// its values Secret, its deployments and their values Secrets (UIDs, and
// whether being deleted).
func snapshot(t *testing.T, ctx context.Context, key types.NamespacedName) string {
	t.Helper()
	b := &fleet.Bundle{}
	must(t, env.Client.Get(ctx, key, b))
	out := fmt.Sprintf("bundle %s finalizers %v deleting %v; values Secret %s", b.UID, b.Finalizers, b.DeletionTimestamp != nil, secretState(ctx, key))
	bds, err := bundleDeployments(ctx, key.Namespace, key.Name)
	must(t, err)
	for _, cl := range sortedKeys(bds) {
		bd := bds[cl]
		out += fmt.Sprintf("; deployment on %s %s deleting %v, values Secret %s", cl, bd.UID, bd.DeletionTimestamp != nil, secretState(ctx, client.ObjectKeyFromObject(bd)))
	}
	return out
}

func secretState(ctx context.Context, key types.NamespacedName) string {
	sec := &corev1.Secret{}
	if err := env.Client.Get(ctx, key, sec); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%s deleting %v", sec.UID, sec.DeletionTimestamp != nil)
}

// startDeploymentCache starts a cache of BundleDeployments and Clusters
// for the reconciler under test, apart from the running manager's.
func startDeploymentCache(t *testing.T, ctx context.Context) *bundle.CachedObjects {
	t.Helper()
	c, err := cache.New(env.Config, cache.Options{Scheme: testenv.Scheme})
	must(t, err)
	objs, err := bundle.NewCachedObjects(ctx, c)
	must(t, err)
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("deployment cache did not sync")
	}
	return objs
}

// cacheInSync reports whether objs shows the Bundle key's deployments as
// the API server has them.
func cacheInSync(ctx context.Context, objs *bundle.CachedObjects, key types.NamespacedName) error {
	want, err := bundleDeployments(ctx, key.Namespace, key.Name)
	if err != nil {
		return err
	}
	got, err := objs.DeploymentsOf(key.Namespace + "/" + key.Name)
	if err != nil {
		return err
	}
	in := map[types.UID]bool{}
	for _, bd := range got {
		in[bd.UID] = true
	}
	if len(got) != len(want) {
		return fmt.Errorf("cache shows %d deployments, the API server %d", len(got), len(want))
	}
	for _, bd := range want {
		if !in[bd.UID] {
			return fmt.Errorf("cache lacks deployment %s/%s", bd.Namespace, bd.Name)
		}
	}
	return nil
}

// laggingClient reads the Bundle key as cached (nil: not found), like a
// cache that has not seen it deleted and created again; everything else
// goes to the API server.
func laggingClient(c client.WithWatch, key types.NamespacedName, cached *fleet.Bundle) client.Client {
	return interceptor.NewClient(c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			b, ok := obj.(*fleet.Bundle)
			if !ok || k != key {
				return c.Get(ctx, k, obj, opts...)
			}
			if cached == nil {
				return apierrors.NewNotFound(fleet.GroupVersion.WithResource("bundles").GroupResource(), k.Name)
			}
			cached.DeepCopyInto(b)
			return nil
		},
	})
}

// oldStillThere answers reads of the Bundle key's metadata with the old
// UID: the API server still had the old Bundle when the reconciler
// checked, and the new one came right after.
func oldStillThere(c client.WithWatch, key types.NamespacedName, old types.UID) client.Reader {
	return interceptor.NewClient(c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, k, obj, opts...); err != nil {
				return err
			}
			if m, ok := obj.(*metav1.PartialObjectMetadata); ok && k == key && m.Kind == "Bundle" {
				m.UID = old
			}
			return nil
		},
	})
}
