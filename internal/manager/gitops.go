package manager

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	gitops "github.com/fleetgo/fleet/internal/gitops/controller"
)

// setupGitOps adds the GitRepo controller and, when WebhookAddr is set, the
// git webhook receiver.
func setupGitOps(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	_, err := gitops.Setup(ctx, mgr, gitops.Options{
		SystemNamespace: opts.SystemNamespace,
		WebhookAddr:     opts.WebhookAddr,
		CheckoutLimits:  opts.GitLimits,
	})
	return err
}
