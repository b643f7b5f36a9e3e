package manager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi/serve"
	"github.com/fleetgo/fleet/internal/testenv"
)

// lateCRDs are the fleet-crd files of the kinds whose controllers a
// manager may start without.
var lateCRDs = []string{"fleet.cattle.io_helmops.yaml", "fleet.cattle.io_schedules.yaml"}

// TestControllersStartWhenTheirCRDsAppear: a manager (leader election on,
// HelmOps and Schedules enabled) started on a cluster without the HelmOp
// and Schedule CRDs runs the HelmOp and Schedule controllers once the
// fleet-crd chart's CRDs are installed, without a restart: a Schedule then
// lists its matching Cluster and marks it scheduled, a HelmOp with an unreachable
// repository gets its status conditions. The HelmOp of another shard is
// still left alone: the late HelmOp informer keeps the shard's selector.
func TestControllersStartWhenTheirCRDsAppear(t *testing.T) {
	ctx := context.Background()
	old, err := testenv.Start(testenv.Options{Name: "manager-late-crds", WithoutCRDs: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Stop() })
	installCRDs(t, old.Config, func(name string) bool { return !isLateCRD(name) })
	for _, ns := range []string{fleet.DefaultSystemNamespace, fleet.DefaultSystemRegistrationNamespace} {
		if err := old.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "late-crds"}}
	if err := old.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "dev"}}
	if err := old.Client.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}

	startManagerOn(t, old.Config, Options{MetricsAddr: "0", ProbeAddr: "0", WebhookAddr: "0",
		ContentAPI: serve.Options{Addr: "0"}, Schedules: true, LeaderElection: true})
	// Registration giving the Cluster its namespace shows the manager
	// runs and leads.
	eventually(t, 2*time.Minute, func() error {
		if err := old.Client.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
			return err
		}
		if cluster.Status.Namespace == "" {
			return fmt.Errorf("cluster not processed yet")
		}
		return nil
	})

	// The fleet-crd chart is upgraded while the manager runs.
	installCRDs(t, old.Config, isLateCRD)
	s := &fleet.Schedule{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "hourly"}, Spec: fleet.ScheduleSpec{
		Schedule: "0 0 * * * *", Duration: metav1.Duration{Duration: 30 * time.Minute}, Location: "UTC",
		Targets: fleet.ScheduleTargets{Clusters: []fleet.ScheduleTarget{{ClusterName: cluster.Name}}}}}
	mine := unreachableHelmOp(ns.Name, "app", nil)
	other := unreachableHelmOp(ns.Name, "other-shard", map[string]string{fleet.ShardLabel: "other"})
	for _, o := range []client.Object{s, mine, other} {
		if err := old.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	eventually(t, 2*time.Minute, func() error {
		if err := old.Client.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
			return err
		}
		if !slices.Equal(s.Status.MatchingClusters, []string{cluster.Name}) {
			return fmt.Errorf("schedule matches %v", s.Status.MatchingClusters)
		}
		if err := old.Client.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
			return err
		}
		if !cluster.Status.Scheduled {
			return fmt.Errorf("cluster not scheduled")
		}
		return nil
	})
	eventually(t, 2*time.Minute, func() error {
		if err := old.Client.Get(ctx, client.ObjectKeyFromObject(mine), mine); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(mine.Status.Conditions, fleet.ConditionAccepted); c == nil {
			return fmt.Errorf("HelmOp has no Accepted condition: %+v", mine.Status.Conditions)
		}
		return nil
	})
	// The other shard's HelmOp, created with this one, is not reconciled.
	time.Sleep(2 * time.Second)
	if err := old.Client.Get(ctx, client.ObjectKeyFromObject(other), other); err != nil {
		t.Fatal(err)
	}
	if len(other.Finalizers) != 0 || len(other.Status.Conditions) != 0 {
		t.Errorf("another shard's HelmOp was reconciled: finalizers %v, conditions %v", other.Finalizers, other.Status.Conditions)
	}
}

// isLateCRD reports whether a fleet-crd file defines a kind of lateCRDs.
func isLateCRD(name string) bool {
	for _, f := range lateCRDs {
		if name == f {
			return true
		}
	}
	return false
}

// installCRDs installs the fleet-crd chart's CRDs whose file name keep
// accepts, and waits until the API server serves them.
func installCRDs(t *testing.T, cfg *rest.Config, keep func(string) bool) {
	t.Helper()
	entries, err := os.ReadDir(testenv.CRDDir())
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".yaml") && keep(e.Name()) {
			paths = append(paths, filepath.Join(testenv.CRDDir(), e.Name()))
		}
	}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
}

// unreachableHelmOp is a HelmOp whose chart repository refuses
// connections: its controller can only report the failure.
func unreachableHelmOp(ns, name string, labels map[string]string) *fleet.HelmOp {
	return &fleet.HelmOp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: fleet.HelmOpSpec{BundleSpec: fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{
			DefaultNamespace: "app",
			Helm:             &fleet.HelmOptions{Repo: "http://127.0.0.1:1/charts", Chart: "app", Version: "1.0.0"},
		}}},
	}
}

// startManagerOn runs a whole manager against cfg until the test ends.
func startManagerOn(t *testing.T, cfg *rest.Config, opts Options) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	mgr, err := New(ctx, cfg, opts)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// TestAwaitedComponentSetUpOnce: once discovery lists an awaited
// component's CRD, the poller sets it up once, also when that fails (a
// second controller would reconcile everything twice), and stops asking
// when nothing is awaited any more; a component whose CRD is still missing
// stays awaited.
func TestAwaitedComponentSetUpOnce(t *testing.T) {
	calls := map[string]int{}
	p := &servedKindsPoller{cfg: up.Config, policies: nil,
		awaited: []Component{{Name: "served", CRD: "HelmOp"}, {Name: "missing", CRD: "NoSuchKind"}},
		setup: func(_ context.Context, c Component) error {
			calls[c.Name]++
			return fmt.Errorf("failing on purpose")
		}}
	log := testr.New(t)
	for range 2 {
		if p.check(context.Background(), log) {
			t.Fatal("done while NoSuchKind is awaited")
		}
	}
	if calls["served"] != 1 || calls["missing"] != 0 {
		t.Errorf("set-ups %v, want served once, missing never", calls)
	}
	p.awaited = p.awaited[:0]
	if !p.check(context.Background(), log) {
		t.Error("not done with nothing awaited")
	}
}
