package manager

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fleetgo/fleet/internal/contentapi/serve"
)

// contentAPIOrRBAC returns the content API options to run with: as given,
// unless the API server has no aggregation layer to route agents' reads to
// it, in which case the content API is turned off and each cluster is
// granted its Contents through a ClusterRole instead (as with
// --content-api-addr=0). Without this an operator who installs the chart's
// defaults on such an API server would get agents that cannot read any
// manifest until they found the flag. Agents need no setting: they read
// Contents directly when the API server does not serve the content API.
func contentAPIOrRBAC(ctx context.Context, live client.Reader, o serve.Options) serve.Options {
	l := log.FromContext(ctx).WithName("content-api")
	ok, err := serve.AggregationLayer(ctx, live)
	switch {
	case err != nil:
		l.Error(err, "cannot tell whether the API server has an aggregation layer; serving the content API")
		return o
	case ok:
		return o
	}
	l.Info("the API server has no aggregation layer (no request-header CA in kube-system/extension-apiserver-authentication): " +
		"the content API is off and each cluster is granted its Contents through a ClusterRole instead")
	return serve.Options{Addr: "0"}
}
