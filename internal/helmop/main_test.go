package helmop_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/bundle"
	"github.com/fleetgo/fleet/internal/helmop"
	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// The manager cluster shared by every test of this package, with the real
// HelmOp controller and the targeting Bundle controller (which fills the
// Bundles' status) running in-process.
var env *testenv.Cluster

// ghProxy stands in for github.com (see githubProxy).
var ghProxy *githubProxy

const timeout = 60 * time.Second

// systemNamespace is the manager's namespace of the controller under test,
// where its known-hosts ConfigMap lives.
const systemNamespace = "fleet-helmop-system"

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	ctrl.SetLogger(logr.Discard())
	var err error
	// Before anything makes an HTTPS request: Go reads HTTPS_PROXY once.
	if ghProxy, err = startGitHubProxy(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer ghProxy.Close()
	env, err = testenv.Start(testenv.Options{Name: "helmop"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: systemNamespace}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	stop, err := fleettest.StartControllers(env.Config, func(ctx context.Context, mgr ctrl.Manager) error {
		if err := bundle.Setup(ctx, mgr, bundle.Options{Workers: 2, Coalesce: 200 * time.Millisecond}); err != nil {
			return err
		}
		_, err := helmop.Setup(ctx, mgr, helmop.Options{
			MinPollingInterval: time.Second, MaxRetryInterval: 2 * time.Second, SystemNamespace: systemNamespace,
		})
		return err
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	return m.Run()
}

func newNamespace(t testing.TB, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func getOp(t testing.TB, ns, name string) *fleet.HelmOp {
	t.Helper()
	op := &fleet.HelmOp{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, op); err != nil {
		t.Fatal(err)
	}
	return op
}

// bundleOf returns the HelmOp's Bundle, or nil.
func bundleOf(t testing.TB, ns, name string) *fleet.Bundle {
	t.Helper()
	var list fleet.BundleList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{fleet.HelmOpLabel: name}); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) == 0 {
		return nil
	}
	if len(list.Items) > 1 {
		t.Fatalf("HelmOp %s has %d bundles", name, len(list.Items))
	}
	return &list.Items[0]
}

func condition(op *fleet.HelmOp, typ string) *metav1.Condition {
	return meta.FindStatusCondition(op.Status.Conditions, typ)
}
