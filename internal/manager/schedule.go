package manager

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleetgo/fleet/internal/controller/schedule"
)

// setupSchedule adds the Schedule controller when Schedules are enabled
// (EXPERIMENTAL_SCHEDULES=true or --schedules, as Rancher Fleet's
// experimental flag). It is unsharded: one controller must see every
// Schedule of a namespace, since together they decide each Cluster's
// flags.
func setupSchedule(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	if !opts.Schedules {
		return nil
	}
	return schedule.Setup(ctx, mgr, schedule.Options{})
}
