package manager

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleetgo/fleet/internal/gitops/git"
	"github.com/fleetgo/fleet/internal/helmop"
)

// setupHelmOp adds the HelmOp controller (charts from repositories without
// git), unless it is disabled. On a cluster whose CRDs predate HelmOps it
// runs once the CRD is served, possibly after the manager started. git::
// charts over SSH follow the same host key policy as GitRepos: the
// known-hosts ConfigMap of SystemNamespace when the helm Secret has no
// known_hosts, and insecureSkipHostKeyChecks, set here too so that it
// holds with GitOps disabled.
func setupHelmOp(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	if opts.DisableHelmOps {
		return nil
	}
	git.SetInsecureSkipHostKeyChecks(opts.InsecureSkipHostKeyChecks)
	if _, err := helmop.Setup(ctx, mgr, helmop.Options{SystemNamespace: opts.SystemNamespace, Policies: opts.policies}); err != nil {
		return err
	}
	if opts.helmOpsRunning != nil {
		opts.helmOpsRunning.Store(true)
	}
	return nil
}
