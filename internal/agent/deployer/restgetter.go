package deployer

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// restGetter gives Helm a client for one deployment: the downstream config
// (impersonating the bundle's service account when set) and a discovery
// cache that reset() refreshes after CRDs of the bundle were created, so the
// kinds they define resolve in the same pass.
type restGetter struct {
	cfg       *rest.Config
	namespace string

	once   sync.Once
	err    error
	disc   discovery.CachedDiscoveryInterface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newRESTGetter(cfg *rest.Config, namespace string) *restGetter {
	return &restGetter{cfg: rest.CopyConfig(cfg), namespace: namespace}
}

func (g *restGetter) init() error {
	g.once.Do(func() {
		dc, err := discovery.NewDiscoveryClientForConfig(g.cfg)
		if err != nil {
			g.err = err
			return
		}
		g.disc = memory.NewMemCacheClient(dc)
		g.mapper = restmapper.NewDeferredDiscoveryRESTMapper(g.disc)
	})
	return g.err
}

func (g *restGetter) ToRESTConfig() (*rest.Config, error) { return rest.CopyConfig(g.cfg), nil }

func (g *restGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	if err := g.init(); err != nil {
		return nil, err
	}
	return g.disc, nil
}

func (g *restGetter) ToRESTMapper() (meta.RESTMapper, error) {
	if err := g.init(); err != nil {
		return nil, err
	}
	return g.mapper, nil
}

func (g *restGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return &nsClientConfig{getter: g}
}

// reset forgets cached discovery, after new CRDs were established.
func (g *restGetter) reset() {
	if g.init() == nil {
		g.disc.Invalidate()
		g.mapper.Reset()
	}
}

// nsClientConfig is the minimal clientcmd.ClientConfig Helm's factory needs:
// the rest config and the release namespace.
type nsClientConfig struct{ getter *restGetter }

func (c *nsClientConfig) RawConfig() (clientcmdapi.Config, error) {
	return *clientcmdapi.NewConfig(), nil
}

func (c *nsClientConfig) ClientConfig() (*rest.Config, error) { return c.getter.ToRESTConfig() }

func (c *nsClientConfig) Namespace() (string, bool, error) { return c.getter.namespace, true, nil }

func (c *nsClientConfig) ConfigAccess() clientcmd.ConfigAccess { return nil }
