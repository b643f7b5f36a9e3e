package install_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent"
	"github.com/fleetgo/fleet/internal/install"
	"github.com/fleetgo/fleet/internal/manager"
	"github.com/fleetgo/fleet/internal/testenv"
)

// workspace is where the tests' tokens and clusters live upstream.
const workspace = "fleet-default"

var (
	mgrOnce   sync.Once
	mgrErr    error
	mgrCancel context.CancelFunc = func() {}
	mgrDone                      = make(chan struct{})
)

// startManager installs the manager charts with helm and then runs the
// fleet-controller code in-process against the upstream cluster (the
// chart's Deployment has no kubelet to run it in envtest). It stops after
// all tests.
func startManager(t *testing.T) {
	t.Helper()
	installManagerChart(t)
	mgrOnce.Do(func() {
		waitCRDsEstablished(t, upstream.Client)
		ctx, cancel := context.WithCancel(context.Background())
		mgr, err := manager.New(ctx, upstream.Config, manager.Options{
			MetricsAddr: "0", ProbeAddr: "0", WebhookAddr: "0",
			AgentCheckinInterval: 5 * time.Second,
			// As the chart's default (bootstrap.enabled, --bootstrap-namespace=fleet-local).
			BootstrapNamespace: fleet.BootstrapNamespace,
		})
		if err != nil {
			cancel()
			mgrErr = err
			return
		}
		mgrCancel = cancel
		go func() { defer close(mgrDone); _ = mgr.Start(ctx) }()
		mgrErr = upstream.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: workspace}})
	})
	if mgrErr != nil {
		t.Fatalf("starting the manager: %v", mgrErr)
	}
}

func stopManager() {
	mgrCancel()
	select {
	case <-mgrDone:
	case <-time.After(30 * time.Second):
	}
}

// runAgent runs the fleet-agent code in-process against a downstream
// cluster, as the chart's Deployment would, until the test ends.
func runAgent(t *testing.T, down *testenv.Cluster) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(ctx, agent.Options{Downstream: down.Config, Namespace: fleet.DefaultSystemNamespace,
			CheckinInterval: 5 * time.Second, FirstCheckinDelay: time.Second})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent stopped with %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("agent did not stop")
		}
	})
}

// registeredCluster waits for the Cluster whose clientID is down's
// kube-system UID (the default identity) to be registered and checked in.
func registeredCluster(t *testing.T, down *testenv.Cluster) *fleet.Cluster {
	t.Helper()
	ctx := context.Background()
	uid, err := down.KubeSystemUID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var found *fleet.Cluster
	eventually(t, 120*time.Second, func() error {
		list := &fleet.ClusterList{}
		if err := upstream.Client.List(ctx, list, client.InNamespace(workspace)); err != nil {
			return err
		}
		for i := range list.Items {
			c := &list.Items[i]
			if c.Spec.ClientID != uid {
				continue
			}
			if c.Status.Namespace == "" || c.Status.Agent.LastSeen.IsZero() {
				return fmt.Errorf("cluster %s: namespace %q, lastSeen %v", c.Name, c.Status.Namespace, c.Status.Agent.LastSeen)
			}
			found = c
			return nil
		}
		return fmt.Errorf("no Cluster with clientID %s in %s yet", uid, workspace)
	})
	// The agent now holds its own credential and forgot the token.
	eventually(t, 60*time.Second, func() error {
		s := &corev1.Secret{}
		if err := down.Client.Get(ctx, client.ObjectKey{Namespace: fleet.DefaultSystemNamespace, Name: "fleet-agent"}, s); err != nil {
			return err
		}
		for _, k := range []string{"kubeconfig", "deploymentNamespace", "clusterNamespace", "clusterName"} {
			if len(s.Data[k]) == 0 {
				return fmt.Errorf("agent secret lacks %s", k)
			}
		}
		if string(s.Data["clusterName"]) != found.Name || string(s.Data["deploymentNamespace"]) != found.Status.Namespace {
			return fmt.Errorf("agent secret names cluster %s/%s", s.Data["clusterName"], s.Data["deploymentNamespace"])
		}
		err := down.Client.Get(ctx, client.ObjectKey{Namespace: fleet.DefaultSystemNamespace, Name: "fleet-agent-bootstrap"}, &corev1.Secret{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("bootstrap secret still there (%v)", err)
		}
		return nil
	})
	return found
}

// tokenValues creates a ClusterRegistrationToken and returns the values
// YAML the manager issues for it (what an admin saves as values.yaml).
func tokenValues(t *testing.T, name string) string {
	t.Helper()
	ctx := context.Background()
	tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: workspace},
		Spec: fleet.ClusterRegistrationTokenSpec{TTL: &metav1.Duration{Duration: time.Hour}}}
	if err := upstream.Client.Create(ctx, tok); err != nil {
		t.Fatal(err)
	}
	var values string
	eventually(t, 60*time.Second, func() error {
		s := &corev1.Secret{}
		if err := upstream.Client.Get(ctx, client.ObjectKey{Namespace: workspace, Name: name}, s); err != nil {
			return err
		}
		if len(s.Data["values"]) == 0 {
			return fmt.Errorf("no values yet")
		}
		values = string(s.Data["values"])
		return nil
	})
	return values
}

// TestAgentTokenAndAgentConfigRegisterWithLabels follows seed 000: the
// agent-config output, then the agent-token output, applied to a
// downstream cluster register it with the labels.
func TestAgentTokenAndAgentConfigRegisterWithLabels(t *testing.T) {
	startManager(t)
	ctx := context.Background()

	cfgOut, err := fleetCLI(t, "install", "agent-config", "-l", "env=prod", "-l", "team=blue")
	if err != nil {
		t.Fatal(err)
	}
	tokenOut, err := fleetCLI(t, "--kubeconfig", upstream.Kubeconfig, "-n", workspace, "install", "agent-token", "--ttl", "30m")
	if err != nil {
		t.Fatal(err)
	}
	for _, stream := range []string{cfgOut, tokenOut} {
		objs, err := install.Objects(stream)
		if err != nil {
			t.Fatal(err)
		}
		if err := install.Apply(ctx, downstream2.Client, objs); err != nil {
			t.Fatal(err)
		}
	}
	// The token output left the agent-config ConfigMap alone.
	cm := &corev1.ConfigMap{}
	if err := downstream2.Client.Get(ctx, client.ObjectKey{Namespace: fleet.DefaultSystemNamespace, Name: "fleet-agent"}, cm); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cm.Data["config"], `"team":"blue"`) {
		t.Fatalf("agent config was overwritten: %s", cm.Data["config"])
	}
	// The token exists upstream with the TTL asked for.
	toks := &fleet.ClusterRegistrationTokenList{}
	if err := upstream.Client.List(ctx, toks, client.InNamespace(workspace)); err != nil {
		t.Fatal(err)
	}
	var ttlOK bool
	for _, tok := range toks.Items {
		if strings.HasPrefix(tok.Name, "token-") && tok.Spec.TTL != nil && tok.Spec.TTL.Duration == 30*time.Minute {
			ttlOK = true
		}
	}
	if !ttlOK {
		t.Fatalf("no token with ttl 30m among %d tokens", len(toks.Items))
	}

	runAgent(t, downstream2)
	cluster := registeredCluster(t, downstream2)
	if cluster.Labels["env"] != "prod" || cluster.Labels["team"] != "blue" {
		t.Fatalf("registered cluster %s has labels %v", cluster.Name, cluster.Labels)
	}
}

// TestAgentTokenValuesGroupAndEndpoint: --values prints the helm values;
// the URL and CA are the token's (here the same as the kubeconfig's)
// unless overridden; --group adds
// the ClusterGroup's matchLabels; an unknown group is refused.
func TestAgentTokenValuesGroupAndEndpoint(t *testing.T) {
	startManager(t)
	ctx := context.Background()
	if err := upstream.Client.Create(ctx, &fleet.ClusterGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "blue", Namespace: workspace},
		Spec:       fleet.ClusterGroupSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "blue"}}},
	}); err != nil {
		t.Fatal(err)
	}
	out, err := fleetCLI(t, "--kubeconfig", upstream.Kubeconfig, "-n", workspace, "install", "agent-token", "--values", "-g", "blue")
	if err != nil {
		t.Fatal(err)
	}
	v, err := install.ParseValues([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	labels, _ := v["labels"].(map[string]any)
	if v["apiServerURL"] != upstream.Config.Host || v["apiServerCA"] != string(upstream.Config.CAData) ||
		v["token"] == "" || v["clusterNamespace"] != workspace || labels["team"] != "blue" {
		t.Fatalf("values: url %v ca-set %v ns %v labels %v", v["apiServerURL"], v["apiServerCA"] != "", v["clusterNamespace"], labels)
	}

	out, err = fleetCLI(t, "--kubeconfig", upstream.Kubeconfig, "-n", workspace, "install", "agent-token", "--values",
		"--server-url", "https://fleet.example.com", "--no-ca")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ = install.ParseValues([]byte(out)); v["apiServerURL"] != "https://fleet.example.com" || v["apiServerCA"] != "" {
		t.Fatalf("overrides not used: url %v ca-set %v", v["apiServerURL"], v["apiServerCA"] != "")
	}

	if _, err := fleetCLI(t, "--kubeconfig", upstream.Kubeconfig, "-n", workspace, "install", "agent-token", "-g", "nope"); err == nil ||
		!strings.Contains(err.Error(), "no ClusterGroup nope") {
		t.Fatalf("unknown group: %v", err)
	}
	if _, err := fleetCLI(t, "--kubeconfig", upstream.Kubeconfig, "-n", workspace, "install", "agent-token", "--ttl", "soon"); err == nil {
		t.Fatal("bad --ttl accepted")
	}
}
