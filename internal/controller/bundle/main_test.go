package bundle_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/bundle"
	"github.com/fleetgo/fleet/internal/controller/clusterstatus"
	"github.com/fleetgo/fleet/internal/controller/content"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// env is the manager cluster every test of this package shares; the real
// targeting controllers run against it in-process.
var env *testenv.Cluster

const offlineThreshold = 10 * time.Minute

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(logr.Discard())
	var err error
	env, err = testenv.Start(testenv.Options{Name: "targeting"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	stop, err := fleettest.StartControllers(env.Config, func(ctx context.Context, mgr ctrl.Manager) error {
		if err := bundle.Setup(ctx, mgr, bundle.Options{Workers: 8, Coalesce: time.Second, ContentRBAC: true}); err != nil {
			return err
		}
		if err := content.Setup(ctx, mgr, content.Options{PurgeGrace: 2 * time.Second, Coalesce: time.Second, GrantGrace: 3 * time.Second, ContentRBAC: true}); err != nil {
			return err
		}
		return clusterstatus.Setup(ctx, mgr, clusterstatus.Options{OfflineThreshold: offlineThreshold, Coalesce: time.Second})
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	return m.Run()
}

// eventually polls f until it returns nil or the timeout passes.
func eventually(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	fleettest.Eventually(t, timeout, f)
}

// consistently checks that f keeps returning nil for d.
func consistently(t testing.TB, d time.Duration, f func() error) {
	t.Helper()
	fleettest.Consistently(t, d, f)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func createNamespace(t testing.TB, ctx context.Context, name string, lbls map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}}
	if err := env.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// newCluster creates a Cluster with its namespace and status, as the
// registration area would, checked in lastSeen ago (or never if negative).
func newCluster(t testing.TB, ctx context.Context, ws, name string, lbls map[string]string, lastSeen time.Duration) *fleet.Cluster {
	t.Helper()
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name, Labels: lbls}}
	must(t, env.Client.Create(ctx, c))
	cns := names.ClusterNamespace(ws, name)
	createNamespace(t, ctx, cns, nil)
	c.Status.Namespace = cns
	if lastSeen >= 0 {
		c.Status.Agent.LastSeen = metav1.NewTime(time.Now().Add(-lastSeen))
	}
	must(t, env.Client.Status().Update(ctx, c))
	return c
}

// bundleDeployments lists a bundle's deployments, keyed by cluster name.
func bundleDeployments(ctx context.Context, ns, name string) (map[string]*fleet.BundleDeployment, error) {
	list := &fleet.BundleDeploymentList{}
	if err := env.Client.List(ctx, list, client.MatchingLabels{fleet.BundleLabel: name, fleet.BundleNamespaceLabel: ns}); err != nil {
		return nil, err
	}
	out := map[string]*fleet.BundleDeployment{}
	for i := range list.Items {
		out[list.Items[i].Labels[fleet.ClusterLabel]] = &list.Items[i]
	}
	return out, nil
}

// playAgents makes every deployment of the bundle report its current
// version as applied; ready unless the cluster is in notReady, untouched if
// in skip. Conflicts with the controllers' writes are retried.
func playAgents(ctx context.Context, ns, name string, notReady, skip map[string]bool) error {
	bds, err := bundleDeployments(ctx, ns, name)
	if err != nil {
		return err
	}
	for cl, bd := range bds {
		if skip[cl] {
			continue
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(bd), bd); err != nil {
				return err
			}
			if bd.Status.AppliedDeploymentID == bd.Spec.DeploymentID && bd.Status.Ready == !notReady[cl] && bd.Status.NonModified {
				return nil
			}
			bd.Status.AppliedDeploymentID, bd.Status.Ready, bd.Status.NonModified = bd.Spec.DeploymentID, !notReady[cl], true
			return env.Client.Status().Update(ctx, bd)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// update re-reads obj, applies mutate and writes it (status subresource if
// status), retrying on conflicts with the controllers' own writes.
func update(t testing.TB, ctx context.Context, obj client.Object, status bool, mutate func()) {
	t.Helper()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate()
		if status {
			return env.Client.Status().Update(ctx, obj)
		}
		return env.Client.Update(ctx, obj)
	}))
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func resources(content string) []fleet.BundleResource {
	return []fleet.BundleResource{{Name: "cm.yaml", Content: content}}
}
