package registration

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// EnsureLocalObjects does what a start of the manager does to Cluster
// "local", ClusterGroup "default" and GitRepo "bootstrap" of
// opts.BootstrapNamespace (an existing namespace), without writing Secret
// local-cluster: the Cluster is then not imported, so that a test of the
// bootstrap values leaves the package's local agent alone.
func EnsureLocalObjects(ctx context.Context, c client.Client, opts Options) error {
	return (&Bootstrap{reconcilerBase: reconcilerBase{Client: c, Opts: opts}}).ensureLocalObjects(ctx)
}
