package manager

import (
	"fmt"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/fleetgo/fleet/internal/kubeclient"
)

// newCacheOnOwnConnection builds the informer cache with an HTTP client of
// its own, so that the manager's lists and watches travel on a different
// HTTP/2 connection than its writes (kubeclient.OwnConnection).
//
// During a rollout the manager writes thousands of BundleDeployments while
// its watch receives every agent's status update. On one shared connection
// the watch stream queued behind the write traffic; the API server found
// the watcher's buffer full, stalled event delivery to every other watcher
// (agents included) for up to 100 ms, and closed it as unresponsive. The
// audit log of a 2,500-deployment creation showed the manager's
// BundleDeployment watch closed and re-established 15 to 20 times; on its
// own connection, 2 or 3 times (docs/scale-history.md, "Ninth pass").
//
// Its mapper knows, while the cache is built, the scope of kinds served
// only later (buildScopes).
func newCacheOnOwnConnection(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
	own := kubeclient.OwnConnection(cfg)
	hc, err := rest.HTTPClientFor(own)
	if err != nil {
		return nil, fmt.Errorf("informer HTTP client: %w", err)
	}
	opts.HTTPClient = hc
	scopes := &buildScopes{RESTMapper: opts.Mapper}
	opts.Mapper = scopes
	c, err := cache.New(own, opts)
	scopes.Built()
	return c, err
}
