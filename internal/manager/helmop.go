package manager

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
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
	_, err := helmop.Setup(ctx, mgr, helmop.Options{SystemNamespace: opts.SystemNamespace, NoPolicies: opts.noPolicies})
	return err
}

// helmOpsServed asks the API server whether it serves HelmOps. A manager
// upgraded before its fleet-crd chart then runs everything else instead of
// failing to start (its cache could not even be configured for the kind).
func helmOpsServed(cfg *rest.Config) (bool, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return false, err
	}
	list, err := dc.ServerResourcesForGroupVersion(fleet.GroupVersion.String())
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("discovering %s: %w", fleet.GroupVersion, err)
	}
	return servesKind(list, "HelmOp"), nil
}

// servesKind reports whether a discovery list has kind.
func servesKind(list *metav1.APIResourceList, kind string) bool {
	for _, r := range list.APIResources {
		if r.Kind == kind {
			return true
		}
	}
	return false
}
