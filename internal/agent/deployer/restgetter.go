package deployer

import (
	"sync"
	"time"

	"helm.sh/helm/v4/pkg/kube"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/kubectl/pkg/validation"
)

// Discovery is one memory-cached discovery client and REST mapper for a
// downstream cluster, shared by every deployment of a Deployer (and by every
// Deployer built with it, e.g. all simulated agents of a process).
//
// Helm's own client-getter would run a full discovery of the API server on
// every install or upgrade; on a busy agent (or N simulated agents) that is
// most of the CPU and garbage of a deploy. The cache lives as long as the
// process and costs one copy of the cluster's API surface. It is refreshed
// when a kind is not found (a CRD created since, by the bundle or by someone
// else), at most once per missRefreshInterval, and at once after a bundle's
// own CRDs were established.
type Discovery struct {
	disc   discovery.CachedDiscoveryInterface
	mapper *restmapper.DeferredDiscoveryRESTMapper

	mu          sync.Mutex
	lastRefresh time.Time
	version     *version.Info // the server's, cached like the API surface
}

// missRefreshInterval bounds how often a lookup of an unknown kind refreshes
// discovery: a bundle naming a kind that does not exist must not make every
// deploy re-read the API surface.
const missRefreshInterval = time.Second

// CapabilitiesMaxAge is how old the API surface and server version Helm
// renders with (.Capabilities) may be. Helm invalidates the discovery cache
// at the start of every install and upgrade to read them afresh; on the
// shared cache that was a full discovery (GET /api, /apis and /version) per
// deploy, 600 of them while 50 agents installed 2,500 releases. Within this
// age the cache answers; a kind the cache does not know still refreshes it
// at once (missRefreshInterval), and so does a bundle's own new CRD.
const CapabilitiesMaxAge = 10 * time.Second

// NewDiscovery builds a lazy discovery cache for the cluster of cfg; nothing
// is requested until the first lookup.
func NewDiscovery(cfg *rest.Config) (*Discovery, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return nil, err
	}
	disc := memory.NewMemCacheClient(dc)
	return &Discovery{disc: disc, mapper: restmapper.NewDeferredDiscoveryRESTMapper(disc)}, nil
}

// Client is the cached discovery client.
func (d *Discovery) Client() discovery.CachedDiscoveryInterface { return d.disc }

// helmClient is the cached discovery client as Helm's actions get it: their
// Invalidate refreshes only a cache older than CapabilitiesMaxAge.
func (d *Discovery) helmClient() discovery.CachedDiscoveryInterface {
	return &agedDiscovery{CachedDiscoveryInterface: d.disc, d: d}
}

type agedDiscovery struct {
	discovery.CachedDiscoveryInterface
	d *Discovery
}

func (a *agedDiscovery) Invalidate() { a.d.refreshOlderThan(CapabilitiesMaxAge) }

// ServerVersion is kept as long as the API surface: it changes only with
// an upgrade of the API server, and Helm asks for it on every deploy.
func (a *agedDiscovery) ServerVersion() (*version.Info, error) {
	a.d.mu.Lock()
	v := a.d.version
	a.d.mu.Unlock()
	if v != nil {
		return v, nil
	}
	v, err := a.CachedDiscoveryInterface.ServerVersion()
	if err != nil {
		return nil, err
	}
	a.d.mu.Lock()
	a.d.version = v
	a.d.mu.Unlock()
	return v, nil
}

// refreshOlderThan invalidates the cache unless it was refreshed within
// age. The first call always refreshes, since nothing tells how old the
// lazily filled cache is (lastRefresh is zero).
func (d *Discovery) refreshOlderThan(age time.Duration) {
	d.mu.Lock()
	if time.Since(d.lastRefresh) < age {
		d.mu.Unlock()
		return
	}
	d.lastRefresh = time.Now()
	d.version = nil
	d.mu.Unlock()
	d.disc.Invalidate()
	d.mapper.Reset()
}

// RESTMapper maps kinds to resources from the cache, refreshing it on a
// miss (rate limited).
func (d *Discovery) RESTMapper() meta.RESTMapper { return &refreshingMapper{d: d} }

// Invalidate forgets the cached API surface (after new CRDs were
// established); the next lookup discovers again.
func (d *Discovery) Invalidate() { d.refreshOlderThan(0) }

// refreshOnMiss refreshes the cache unless that was done very recently
// (then the refreshed cache, or the refresh in progress, already answers the
// retry).
func (d *Discovery) refreshOnMiss() { d.refreshOlderThan(missRefreshInterval) }

// refreshingMapper is the shared mapper with one retry after a refresh
// when a kind or resource is unknown.
type refreshingMapper struct{ d *Discovery }

// Reset makes the mapper a meta.ResettableRESTMapper: the drift watcher
// resets it when a watched kind's CRD went away, so that a kind deleted
// (or re-created with another scope or plural) is discovered again, at
// most as often as a miss would refresh it.
func (m *refreshingMapper) Reset() { m.d.refreshOnMiss() }

func retryOnMiss[T any](d *Discovery, f func() (T, error)) (T, error) {
	v, err := f()
	if err != nil && meta.IsNoMatchError(err) {
		d.refreshOnMiss()
		return f()
	}
	return v, err
}

func (m *refreshingMapper) KindFor(r schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	return retryOnMiss(m.d, func() (schema.GroupVersionKind, error) { return m.d.mapper.KindFor(r) })
}

func (m *refreshingMapper) KindsFor(r schema.GroupVersionResource) ([]schema.GroupVersionKind, error) {
	return retryOnMiss(m.d, func() ([]schema.GroupVersionKind, error) { return m.d.mapper.KindsFor(r) })
}

func (m *refreshingMapper) ResourceFor(r schema.GroupVersionResource) (schema.GroupVersionResource, error) {
	return retryOnMiss(m.d, func() (schema.GroupVersionResource, error) { return m.d.mapper.ResourceFor(r) })
}

func (m *refreshingMapper) ResourcesFor(r schema.GroupVersionResource) ([]schema.GroupVersionResource, error) {
	return retryOnMiss(m.d, func() ([]schema.GroupVersionResource, error) { return m.d.mapper.ResourcesFor(r) })
}

func (m *refreshingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	return retryOnMiss(m.d, func() (*meta.RESTMapping, error) { return m.d.mapper.RESTMapping(gk, versions...) })
}

func (m *refreshingMapper) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	return retryOnMiss(m.d, func() ([]*meta.RESTMapping, error) { return m.d.mapper.RESTMappings(gk, versions...) })
}

func (m *refreshingMapper) ResourceSingularizer(resource string) (string, error) {
	return m.d.mapper.ResourceSingularizer(resource)
}

// restGetter gives Helm a client for one deployment: the downstream config
// (impersonating the bundle's service account when set) and the shared
// discovery cache. Discovery is readable by every authenticated identity
// and describes the same API surface, so sharing it across identities
// changes nothing but its cost.
type restGetter struct {
	cfg       *rest.Config
	namespace string
	disc      *Discovery
}

func newRESTGetter(cfg *rest.Config, namespace string, disc *Discovery) *restGetter {
	return &restGetter{cfg: rest.CopyConfig(cfg), namespace: namespace, disc: disc}
}

func (g *restGetter) ToRESTConfig() (*rest.Config, error) { return rest.CopyConfig(g.cfg), nil }

func (g *restGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	return g.disc.helmClient(), nil
}

func (g *restGetter) ToRESTMapper() (meta.RESTMapper, error) { return g.disc.RESTMapper(), nil }

func (g *restGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return &nsClientConfig{getter: g}
}

// reset forgets cached discovery, after new CRDs were established.
func (g *restGetter) reset() { g.disc.Invalidate() }

// nsClientConfig is the minimal clientcmd.ClientConfig Helm's factory needs:
// the rest config and the release namespace.
type nsClientConfig struct{ getter *restGetter }

func (c *nsClientConfig) RawConfig() (clientcmdapi.Config, error) {
	return *clientcmdapi.NewConfig(), nil
}

func (c *nsClientConfig) ClientConfig() (*rest.Config, error) { return c.getter.ToRESTConfig() }

func (c *nsClientConfig) Namespace() (string, bool, error) { return c.getter.namespace, true, nil }

func (c *nsClientConfig) ConfigAccess() clientcmd.ConfigAccess { return nil }

// serverValidatedFactory is Helm's factory without client-side OpenAPI
// validation. Helm sends fieldValidation=Strict with every create, apply and
// replace, so the API server rejects unknown or duplicate fields itself; and
// on any server that supports that parameter (every supported Kubernetes
// version) the client-side pass validates nothing: it only downloads and
// parses the OpenAPI v3 document of each GroupVersion of the release to
// learn that the server will validate. That download and parse was most of
// the CPU and garbage of an install or upgrade.
type serverValidatedFactory struct{ kube.Factory }

func (serverValidatedFactory) Validator(string) (validation.Schema, error) {
	return validation.NullSchema{}, nil
}
