package manager

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleetgo/fleet/internal/gitops/git"
	"github.com/fleetgo/fleet/internal/helmop"
)

// setupHelmOp adds the HelmOp controller (charts from repositories without
// git), unless it is disabled (New also disables it when the cluster's
// CRDs predate HelmOps). git:: charts over SSH follow the same host key
// policy as GitRepos: the known-hosts ConfigMap of SystemNamespace when
// the helm Secret has no known_hosts, and insecureSkipHostKeyChecks, set
// here too so that it holds with GitOps disabled.
func setupHelmOp(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	if opts.DisableHelmOps {
		return nil
	}
	git.SetInsecureSkipHostKeyChecks(opts.InsecureSkipHostKeyChecks)
	_, err := helmop.Setup(ctx, mgr, helmop.Options{SystemNamespace: opts.SystemNamespace, Policies: opts.policies})
	return err
}
