package registration

import (
	"context"

	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// EnsureLocalObjects does what a start of the manager does to Cluster
// "local", ClusterGroup "default" and GitRepo "bootstrap" of
// opts.BootstrapNamespace (an existing namespace), without writing Secret
// local-cluster: the Cluster is then not imported, so that a test of the
// bootstrap values leaves the package's local agent alone.
func EnsureLocalObjects(ctx context.Context, c client.Client, opts Options) error {
	return EnsureLocalObjectsRecording(ctx, c, opts, nil)
}

// EnsureLocalObjectsRecording is EnsureLocalObjects recording the
// bootstrap's Events on Cluster "local" with rec.
func EnsureLocalObjectsRecording(ctx context.Context, c client.Client, opts Options, rec events.EventRecorder) error {
	b := &Bootstrap{reconcilerBase: reconcilerBase{Client: c, Reader: c, Opts: opts, Recorder: rec}}
	return b.ensureLocalObjects(ctx)
}
