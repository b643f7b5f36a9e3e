package manager

import (
	"context"

	"k8s.io/client-go/rest"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fleetgo/fleet/internal/contentapi/serve"
	"github.com/fleetgo/fleet/internal/registration"
	"github.com/fleetgo/fleet/internal/scheme"
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

// credentialHandover reports whether the content API may hand registering
// agents their credential (registration.MayHandOverCredentials); when it
// may not, or the question fails, agents get it in a Secret.
func credentialHandover(ctx context.Context, cfg *rest.Config) bool {
	l := log.FromContext(ctx).WithName("content-api")
	var ok bool
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err == nil {
		ok, err = registration.MayHandOverCredentials(ctx, c)
	}
	switch {
	case err != nil:
		l.Error(err, "cannot tell whether fleet-controller may grant `watch registrationcredentials` and `update clusterstatuses`; registering agents get their credential in a Secret and patch their Cluster")
	case !ok:
		l.Info("fleet-controller may not grant `watch registrationcredentials` and `update clusterstatuses` (its ClusterRole is older than the chart's): " +
			"registering agents get their credential in a Secret")
	}
	return err == nil && ok
}
