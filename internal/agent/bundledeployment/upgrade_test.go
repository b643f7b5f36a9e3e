package bundledeployment_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/deployer"
	"github.com/fleetgo/fleet/internal/manifest"
)

// requestLog records the method and path of every request a client makes.
type requestLog struct {
	mu   sync.Mutex
	seen []string
}

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		l.mu.Lock()
		l.seen = append(l.seen, r.Method+" "+r.URL.Path)
		l.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

// config is the downstream admin config with every request recorded in l.
func (l *requestLog) config() *rest.Config {
	cfg := rest.CopyConfig(down.Config)
	cfg.WrapTransport = l.wrap
	return cfg
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// reset returns what was recorded so far and forgets it.
func (l *requestLog) reset() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := l.seen
	l.seen = nil
	return seen
}

func configMaps(docs ...string) *manifest.Manifest {
	var res []fleet.BundleResource
	for i, d := range docs {
		res = append(res, fleet.BundleResource{Name: string(rune('a'+i)) + ".yaml", Content: "apiVersion: v1\nkind: ConfigMap\n" + d})
	}
	m, err := manifest.New(res)
	if err != nil {
		panic(err)
	}
	return m
}

// An upgrade applies each object of the release once, without first
// reading it: objects changed, added and removed all end as the new
// release says (a removed field is gone, a removed object deleted unless
// it is marked keep), and the downstream API server sees no GET of an
// object both releases hold. (Helm still reads an object new to the
// release once, to adopt it if it exists.)
func TestUpgradeAppliesWithoutReading(t *testing.T) {
	ctx := context.Background()
	var log requestLog
	dep, err := deployer.New(log.config(), agentNS)
	must(t, err)
	const ns = "upgrade-apply"
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns}
	v1 := configMaps(
		"metadata:\n  name: changed\ndata:\n  x: \"1\"\n  gone: \"2\"\n",
		"metadata:\n  name: kept\n  annotations:\n    helm.sh/resource-policy: keep\ndata:\n  x: \"1\"\n",
		"metadata:\n  name: removed\ndata:\n  x: \"1\"\n",
	)
	if _, err := dep.Deploy(ctx, deployer.Input{Name: "upgrade-apply", Manifest: v1, Options: opts}); err != nil {
		t.Fatal(err)
	}
	// The Deployer's first deploy fills its discovery cache, the server
	// version included: one GET, and no second one for Helm's check.
	noVersionCheck(t, "the install", log.reset(), 1)
	v2 := configMaps(
		"metadata:\n  name: changed\ndata:\n  x: \"3\"\n",
		"metadata:\n  name: added\ndata:\n  x: \"1\"\n",
	)
	rel, err := dep.Deploy(ctx, deployer.Input{Name: "upgrade-apply", Manifest: v2, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	if rel.Version != 2 {
		t.Fatalf("release version %d, want 2", rel.Version)
	}
	upgrade := log.reset()
	for _, r := range upgrade {
		if strings.HasPrefix(r, "GET ") && strings.HasSuffix(r, "/configmaps/changed") {
			t.Errorf("the upgrade read an object it applies: %s", r)
		}
	}
	noVersionCheck(t, "the upgrade", upgrade, 0)
	cm, err := configMap(t, ns, "changed")
	must(t, err)
	if cm.Data["x"] != "3" {
		t.Errorf("changed: x=%q, want 3", cm.Data["x"])
	}
	if _, ok := cm.Data["gone"]; ok {
		t.Errorf("changed: field gone removed from the manifest is still there: %v", cm.Data)
	}
	if _, err := configMap(t, ns, "added"); err != nil {
		t.Errorf("added: %v", err)
	}
	if _, err := configMap(t, ns, "kept"); err != nil {
		t.Errorf("kept (resource-policy keep): %v", err)
	}
	if _, err := configMap(t, ns, "removed"); !apierrors.IsNotFound(err) {
		t.Errorf("removed: want NotFound, got %v", err)
	}

	// The same after an agent restart, which knows the deployed objects
	// only from the stored release.
	restarted, err := deployer.New(log.config(), agentNS)
	must(t, err)
	log.reset()
	v3 := configMaps("metadata:\n  name: changed\ndata:\n  x: \"4\"\n")
	if _, err := restarted.Deploy(ctx, deployer.Input{Name: "upgrade-apply", Manifest: v3, Options: opts}); err != nil {
		t.Fatal(err)
	}
	// It has looked nothing up yet, but the stored release shows that the
	// namespace exists: it is not read.
	for _, r := range log.reset() {
		if r == "GET /api/v1/namespaces/"+ns {
			t.Errorf("the upgrade read the namespace of an existing release: %s", r)
		}
	}
	if cm, err := configMap(t, ns, "changed"); err != nil || cm.Data["x"] != "4" {
		t.Errorf("changed after the restart: %v, %v", cm, err)
	}
	if _, err := configMap(t, ns, "added"); !apierrors.IsNotFound(err) {
		t.Errorf("added, then removed after the restart: want NotFound, got %v", err)
	}

	// Labels a bundle asks for still reach the namespace of an existing
	// release.
	labelled := opts
	labelled.NamespaceLabels = map[string]string{"team": "green"}
	if _, err := restarted.Deploy(ctx, deployer.Input{Name: "upgrade-apply", Manifest: v3, Options: labelled}); err != nil {
		t.Fatal(err)
	}
	got := &corev1.Namespace{}
	must(t, down.Client.Get(ctx, client.ObjectKey{Name: ns}, got))
	if got.Labels["team"] != "green" {
		t.Errorf("namespace labels after an upgrade that asks for team=green: %v", got.Labels)
	}
}

// noVersionCheck fails when a deploy asked the API server for its version
// more than allowed times: Helm's reachability check does on every install
// and upgrade, and the agent answers it itself (it has just read the
// release's history from the same server).
func noVersionCheck(t *testing.T, what string, requests []string, allowed int) {
	t.Helper()
	n := 0
	for _, r := range requests {
		if r == "GET /version" {
			n++
		}
	}
	if n > allowed {
		t.Errorf("%s asked the API server for its version %d times, want at most %d (Helm's reachability check)", what, n, allowed)
	}
}

// A release installed with client-side apply (takeOwnership) is upgraded
// by Helm's own path, which first hands the fields the client-side writer
// owned to the server-side applier: so a field dropped from the manifest
// is removed, not left behind under the old owner.
func TestUpgradeOverClientSideApply(t *testing.T) {
	ctx := context.Background()
	dep, err := deployer.New(down.Config, agentNS)
	must(t, err)
	const ns = "upgrade-csa"
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns, Helm: &fleet.HelmOptions{TakeOwnership: true}}
	v1 := configMaps("metadata:\n  name: migrated\ndata:\n  x: \"1\"\n  gone: \"2\"\n")
	if _, err := dep.Deploy(ctx, deployer.Input{Name: "upgrade-csa", Manifest: v1, Options: opts}); err != nil {
		t.Fatal(err)
	}
	cm, err := configMap(t, ns, "migrated")
	must(t, err)
	for _, f := range cm.ManagedFields {
		if f.Operation != "Update" {
			t.Fatalf("the install was meant to be client-side applied, but %s wrote with %s", f.Manager, f.Operation)
		}
	}
	v2 := configMaps("metadata:\n  name: migrated\ndata:\n  x: \"3\"\n")
	if _, err := dep.Deploy(ctx, deployer.Input{Name: "upgrade-csa", Manifest: v2, Options: opts}); err != nil {
		t.Fatal(err)
	}
	cm, err = configMap(t, ns, "migrated")
	must(t, err)
	if cm.Data["x"] != "3" || len(cm.Data) != 1 {
		t.Errorf("after the upgrade data=%v, want only x=3 (gone dropped)", cm.Data)
	}
}
