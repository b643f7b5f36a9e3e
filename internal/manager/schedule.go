package manager

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleetgo/fleet/internal/controller/schedule"
)

// setupSchedule adds the Schedule controller when Schedules are enabled
// (EXPERIMENTAL_SCHEDULES=true or --schedules, as Rancher Fleet's
// experimental flag); on a cluster whose CRDs predate Schedules, once the
// CRD is served, possibly after the manager started. It is unsharded: one
// controller must see every Schedule of a namespace, since together they
// decide each Cluster's flags.
//
// Disabled, it still releases what Schedules hold (schedule.SetupDisabled):
// Cluster flags are cleared and deleted Schedules lose their finalizer.
func setupSchedule(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	if !opts.Schedules {
		return schedule.SetupDisabled(ctx, mgr)
	}
	return schedule.Setup(ctx, mgr, schedule.Options{Workers: opts.Workers})
}
