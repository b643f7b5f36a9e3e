package manager

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleetgo/fleet/internal/helmop"
)

// setupHelmOp adds the HelmOp controller (charts from repositories without
// git), unless it is disabled.
func setupHelmOp(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	if opts.DisableHelmOps {
		return nil
	}
	_, err := helmop.Setup(ctx, mgr, helmop.Options{})
	return err
}
