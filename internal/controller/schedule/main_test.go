package schedule_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleetgo/fleet/internal/controller/clusterstatus"
	"github.com/fleetgo/fleet/internal/controller/schedule"
	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// env is the manager cluster shared by every test of this package, with
// the Schedule controller and the Cluster status controller (another
// writer of Cluster status) running in-process.
var env *testenv.Cluster

const timeout = 60 * time.Second

// start is the controller's clock when the suite began: Saturday
// 2030-06-15 12:00:00 UTC. The clock then runs at real speed, so that
// windows open and close by themselves (TestWakesAtWindowBoundaries)
// while tests that need "inside a daily window" stay inside it for an
// hour.
var start = time.Date(2030, 6, 15, 12, 0, 0, 0, time.UTC)

var began = time.Now()

func now() time.Time { return start.Add(time.Since(began)) }

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	ctrl.SetLogger(logr.Discard())
	var err error
	if env, err = testenv.Start(testenv.Options{Name: "schedule"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	stop, err := fleettest.StartControllers(env.Config, func(ctx context.Context, mgr ctrl.Manager) error {
		if err := clusterstatus.Setup(ctx, mgr, clusterstatus.Options{Now: now, Settle: time.Millisecond, RollupInterval: time.Millisecond}); err != nil {
			return err
		}
		return schedule.Setup(ctx, mgr, schedule.Options{Now: now})
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
