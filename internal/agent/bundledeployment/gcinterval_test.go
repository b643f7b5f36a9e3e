package bundledeployment_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
	"github.com/fleetgo/fleet/internal/agent/deployer"
	"github.com/fleetgo/fleet/internal/manifest"
	"github.com/fleetgo/fleet/internal/testenv"
)

// Options.GCInterval is the interval of the garbage collector: with 2s
// (the agent passes its config's garbageCollectionInterval, see
// internal/agent TestAgentConfigGCIntervalReachesCollector), a release
// whose BundleDeployment never existed is removed well within the wait of
// eventually (90s), where the default 15m would leave it.
//
// The agent here has an agent namespace and cluster namespace of its own,
// so that it touches none of the package's agent's releases, and it
// reads upstream as an admin (only its garbage collection matters).
func TestGarbageCollectionIntervalOption(t *testing.T) {
	const (
		agentNamespace   = "gc-config-agent"
		clusterNamespace = "gc-config-cluster"
		releaseNamespace = "gc-config-ns"
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	must(t, down.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}}))
	must(t, up.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clusterNamespace}}))

	dep, err := deployer.New(down.Config, agentNamespace)
	must(t, err)
	m, err := manifest.New([]fleet.BundleResource{{Name: "cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: config-orphan\n"}})
	must(t, err)
	_, err = dep.Deploy(ctx, deployer.Input{Name: "config-never-existed", Manifest: m,
		Options: fleet.BundleDeploymentOptions{DefaultNamespace: releaseNamespace}})
	must(t, err)
	_, err = configMap(t, releaseNamespace, "config-orphan")
	must(t, err)

	mgr, err := ctrl.NewManager(up.Config, ctrl.Options{
		Scheme:                 testenv.Scheme,
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{clusterNamespace: {}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// The package's agent runs a controller of the same name.
		Controller: config.Controller{SkipNameValidation: ptr(true)},
	})
	must(t, err)
	must(t, bundledeployment.Setup(ctx, bundledeployment.Options{
		Upstream: mgr, Downstream: down.Config, ClusterNamespace: clusterNamespace,
		AgentNamespace: agentNamespace, Workers: 1, GCInterval: 2 * time.Second,
	}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "gc-config agent manager:", err)
		}
	}()
	defer func() { cancel(); <-done }()

	wantGone(t, releaseNamespace, "config-orphan")
	eventually(t, "release storage of config-never-existed removed", func() error {
		list := &corev1.SecretList{}
		if err := down.Client.List(ctx, list, client.InNamespace(releaseNamespace), client.MatchingLabels{"owner": "helm"}); err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%d release secrets left", len(list.Items))
		}
		return nil
	})
}
