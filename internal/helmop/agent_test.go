package helmop_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
	"github.com/fleetgo/fleet/internal/testenv"
)

// startAgent runs the agent's BundleDeployment reconciler (real Helm) for
// the cluster namespace cns until the test ends, with the manager cluster
// as its downstream cluster too, as for Rancher's local cluster.
func startAgent(t *testing.T, cns string) {
	t.Helper()
	const agentNS = "cattle-fleet-system"
	ctx, cancel := context.WithCancel(context.Background())
	err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNS}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 testenv.Scheme,
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{cns: {}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := bundledeployment.Setup(ctx, bundledeployment.Options{
		Upstream: mgr, Downstream: env.Config, ClusterNamespace: cns, AgentNamespace: agentNS,
		Workers: 2, GCInterval: 5 * time.Second,
	}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
}
