package manager

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleetgo/fleet/internal/controller/schedule"
)

// setupSchedule adds the Schedule controller, run when Schedules are
// enabled (EXPERIMENTAL_SCHEDULES=true or --schedules, as Rancher Fleet's
// experimental flag); on a cluster whose CRDs predate Schedules, once the
// CRD is served, possibly after the manager started. It is unsharded: one
// controller must see every Schedule of a namespace, since together they
// decide each Cluster's flags.
func setupSchedule(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	return schedule.Setup(ctx, mgr, schedule.Options{Workers: opts.Workers})
}

// setupScheduleDisabled runs while Schedules are disabled: Cluster flags
// stay as they are (held clusters stay held, as with Rancher Fleet's flag
// off), and a Schedule being deleted clears its own clusters' flags and
// loses its finalizer (schedule.SetupDisabled). Without the Schedule CRD
// at start it is not set up and waits for nothing (SkipWithoutCRD): no
// Schedule can hold a cluster.
func setupScheduleDisabled(ctx context.Context, mgr ctrl.Manager, _ Options) error {
	return schedule.SetupDisabled(ctx, mgr)
}
