package deployer

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery/cached/memory"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/restmapper"
	k8stesting "k8s.io/client-go/testing"
)

// TestHelmInvalidateKeepsAFreshCache: Helm invalidates discovery at the
// start of every action; the shared cache is re-read only once it is older
// than CapabilitiesMaxAge, and the server version is asked once per refresh.
func TestHelmInvalidateKeepsAFreshCache(t *testing.T) {
	fake := &fakediscovery.FakeDiscovery{Fake: &k8stesting.Fake{}, FakedServerVersion: &version.Info{GitVersion: "v1.37.1"}}
	fake.Resources = []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "configmaps", Kind: "ConfigMap", Namespaced: true}}}}
	disc := memory.NewMemCacheClient(fake)
	d := &Discovery{disc: disc, mapper: restmapper.NewDeferredDiscoveryRESTMapper(disc)}
	fetches := func() (groups, versions int) {
		for _, a := range fake.Actions() {
			switch a.GetResource().Resource {
			case "version":
				versions++
			default:
				groups++
			}
		}
		return groups, versions
	}
	action := func() {
		t.Helper()
		hc := d.helmClient()
		hc.Invalidate() // what Helm's getCapabilities does first
		if v, err := hc.ServerVersion(); err != nil || v.GitVersion != "v1.37.1" {
			t.Fatalf("server version %v, %v", v, err)
		}
		if _, err := hc.ServerGroups(); err != nil {
			t.Fatal(err)
		}
	}
	action()
	g1, v1 := fetches()
	if g1 == 0 || v1 != 1 {
		t.Fatalf("first action: %d discovery and %d version requests, want some and 1", g1, v1)
	}
	for range 5 {
		action()
	}
	if g, v := fetches(); g != g1 || v != v1 {
		t.Fatalf("five more actions within %s made %d discovery and %d version requests, want none", CapabilitiesMaxAge, g-g1, v-v1)
	}
	// Once the cache is older than the max age, the next action re-reads it.
	d.mu.Lock()
	d.lastRefresh = time.Now().Add(-CapabilitiesMaxAge - time.Second)
	d.mu.Unlock()
	action()
	if g, v := fetches(); g <= g1 || v != v1+1 {
		t.Fatalf("after %s: %d discovery and %d version requests in total, want more than %d and %d", CapabilitiesMaxAge, g, v, g1, v1+1)
	}
}
