package fleettest

import (
	"context"
	"fmt"
	"os"
	"sync"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fleetgo/fleet/internal/testenv"
)

// StartControllers runs a controller-runtime manager against cfg with the
// controllers setup adds (no metrics or probe listeners), for a package's
// TestMain. stop cancels it and waits until it has stopped.
func StartControllers(cfg *rest.Config, setup func(ctx context.Context, mgr ctrl.Manager) error) (stop func(), err error) {
	ctx, cancel := context.WithCancel(context.Background())
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: testenv.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		cancel()
		return nil, err
	}
	if err := setup(ctx, mgr); err != nil {
		cancel()
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	return func() { cancel(); wg.Wait() }, nil
}
