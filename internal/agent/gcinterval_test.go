package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/deployer"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/manifest"
	"github.com/fleetgo/fleet/internal/testenv"
)

// agentConfigNamespace makes an agent namespace downstream whose
// ConfigMap fleet-agent has config (none when config is empty).
func agentConfigNamespace(t *testing.T, name, config string) string {
	t.Helper()
	ctx := context.Background()
	c := downstream.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	if config == "" {
		return name
	}
	if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: register.ConfigMapName, Namespace: name},
		Data: map[string]string{"config": config}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestEnvGCIntervalFromAgentConfig: the components of a registered run get
// the garbageCollectionInterval of ConfigMap fleet-agent in the agent
// namespace; no ConfigMap, or a value that is not a positive duration, is
// the default 15m, and the agent still starts (no error).
func TestEnvGCIntervalFromAgentConfig(t *testing.T) {
	cred := &register.Credential{DeploymentNamespace: "cluster-x", ClusterNamespace: "fleet-default", ClusterName: "x"}
	for _, tc := range []struct {
		name, config string
		want         time.Duration
	}{
		{name: "env-gc-none", want: register.DefaultGCInterval},
		{name: "env-gc-set", config: `{"garbageCollectionInterval":"90s"}`, want: 90 * time.Second},
		{name: "env-gc-typo", config: `{"garbageCollectionInterval":"2 minutes"}`, want: register.DefaultGCInterval},
		{name: "env-gc-negative", config: `{"garbageCollectionInterval":"-1m"}`, want: register.DefaultGCInterval},
		{name: "env-gc-not-json", config: `{garbageCollectionInterval: 2m}`, want: register.DefaultGCInterval},
	} {
		opts := Options{Downstream: downstream.Config, Namespace: agentConfigNamespace(t, tc.name, tc.config)}
		opts.defaults()
		env, err := newEnv(context.Background(), opts, nil, cred)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if env.GCInterval != tc.want || env.AgentNamespace != tc.name || env.ClusterNamespace != "cluster-x" {
			t.Errorf("%s: env GCInterval %v (want %v), agent namespace %q, cluster namespace %q", tc.name, env.GCInterval, tc.want, env.AgentNamespace, env.ClusterNamespace)
		}
	}
}

// TestAgentConfigGCIntervalReachesCollector: with garbageCollectionInterval
// 2s in ConfigMap fleet-agent, the agent's components, set up as a
// registered run sets them up, remove a release whose BundleDeployment
// never existed within a minute, where the default 15m would leave it.
// The upstream here is a cluster of its own with the Fleet CRDs, read as
// an admin (only the garbage collection matters).
func TestAgentConfigGCIntervalReachesCollector(t *testing.T) {
	up, err := testenv.Start(testenv.Options{Name: "agent-gc-up"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = up.Stop() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const clusterNS, releaseNS = "cluster-gc", "gc-orphans"
	agentNS := agentConfigNamespace(t, "agent-gc", `{"agentTLSMode":"system-store","garbageCollectionInterval":"2s"}`)
	if err := up.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clusterNS}}); err != nil {
		t.Fatal(err)
	}

	dep, err := deployer.New(downstream.Config, agentNS)
	if err != nil {
		t.Fatal(err)
	}
	m, err := manifest.New([]fleet.BundleResource{{Name: "cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: orphan\n"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dep.Deploy(ctx, deployer.Input{Name: "never-existed", Manifest: m,
		Options: fleet.BundleDeploymentOptions{DefaultNamespace: releaseNS}}); err != nil {
		t.Fatal(err)
	}
	orphan := client.ObjectKey{Namespace: releaseNS, Name: "orphan"}
	if err := downstream.Client.Get(ctx, orphan, &corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}

	mgr, err := ctrl.NewManager(up.Config, ctrl.Options{
		Scheme:                 testenv.Scheme,
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{clusterNS: {}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Downstream: downstream.Config, Namespace: agentNS, Workers: 1}
	opts.defaults()
	env, err := newEnv(ctx, opts, mgr, &register.Credential{DeploymentNamespace: clusterNS, ClusterNamespace: "fleet-default", ClusterName: "gc"})
	if err != nil {
		t.Fatal(err)
	}
	if err := setupComponents(ctx, env); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("upstream manager: %v", err)
		}
	}()

	deadline := time.Now().Add(time.Minute)
	for {
		err := collected(ctx, orphan)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("release never-existed not collected within a minute: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// collected is nil once the release's ConfigMap orphan and its Helm
// storage are gone.
func collected(ctx context.Context, orphan client.ObjectKey) error {
	if err := downstream.Client.Get(ctx, orphan, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		return fmt.Errorf("ConfigMap %s still there (err %v)", orphan, err)
	}
	list := &corev1.SecretList{}
	if err := downstream.Client.List(ctx, list, client.InNamespace(orphan.Namespace), client.MatchingLabels{"owner": "helm"}); err != nil {
		return err
	}
	if len(list.Items) > 0 {
		return fmt.Errorf("%d release secrets left", len(list.Items))
	}
	return nil
}
