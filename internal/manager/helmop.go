package manager

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleetgo/fleet/internal/helmop"
)

// setupHelmOp adds the HelmOp controller (charts from repositories without
// git).
func setupHelmOp(ctx context.Context, mgr ctrl.Manager, _ Options) error {
	_, err := helmop.Setup(ctx, mgr, helmop.Options{})
	return err
}
