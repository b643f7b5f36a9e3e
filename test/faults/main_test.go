// Package faults is the fault-injection suite: each test runs the real
// manager, real or simulated agents and real API servers (kube-apiserver +
// etcd from internal/testenv), injects one fault and checks that nothing is
// lost and everything resumes. Recovery times are measured and logged
// (t.Logf, "RECOVERY ..."), never asserted. See docs/reliability.md.
//
// The tests run in file order and share one manager API server; the test
// that restarts it (zz_upstream_test.go) runs last.
package faults

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/agent/simulator"
	"github.com/fleetgo/fleet/internal/manager"
	"github.com/fleetgo/fleet/internal/registration"
	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

const (
	wait = 120 * time.Second
	tick = 250 * time.Millisecond
)

var upstream, downstream *testenv.Cluster

// certsDir holds the certificates of restarted API servers.
var certsDir string

func TestMain(m *testing.M) {
	// Logs go to a file kept for the post-mortem of a failed run.
	logFile, err := os.CreateTemp("", "fleet-faults-*.log")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	logger := zap.New(zap.WriteTo(logFile), zap.UseDevMode(false))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)
	if certsDir, err = os.MkdirTemp("", "fleet-faults-certs-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The manager's API server keeps an audit log of the agents' lists and
	// watches: the reconnect-storm test reads when each agent came back.
	policy := filepath.Join(certsDir, "audit-policy.yaml")
	auditLog = filepath.Join(certsDir, "audit.log")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if upstream, downstream, err = fleettest.StartSystem(fleettest.SystemOptions{Prefix: "faults", Upstream: testenv.Options{
		ExtraAPIServerArgs: map[string]string{"audit-policy-file": policy, "audit-log-path": auditLog},
	}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintln(os.Stderr, "logs of the failed run:", logFile.Name())
	} else {
		_ = os.Remove(logFile.Name())
	}
	_ = downstream.Stop()
	_ = upstream.Stop()
	_ = os.RemoveAll(certsDir)
	os.Exit(code)
}

// runningManager is an in-process fleet-controller that can be killed:
// kill makes every request of its clients fail at once (as if the process
// vanished: nothing it had not sent yet reaches the API server) and cancels
// its context.
type runningManager struct {
	cancel context.CancelFunc
	dead   atomic.Bool
	done   chan struct{}
}

func (m *runningManager) kill() {
	m.dead.Store(true)
	m.cancel()
}

// stop waits for the manager to end (after kill or a clean cancel).
func (m *runningManager) stop(t *testing.T) {
	m.cancel()
	select {
	case <-m.done:
	case <-time.After(60 * time.Second):
		t.Error("manager did not stop")
	}
}

type killableTransport struct {
	rt   http.RoundTripper
	dead *atomic.Bool
}

func (k killableTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if k.dead.Load() {
		return nil, fmt.Errorf("killed")
	}
	return k.rt.RoundTrip(r)
}

// startManager runs the manager with short intervals against upstream.
func startManager(t *testing.T, opts manager.Options) *runningManager {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m := &runningManager{cancel: cancel, done: make(chan struct{})}
	cfg := rest.CopyConfig(upstream.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return killableTransport{rt: rt, dead: &m.dead} })
	if opts.MetricsAddr == "" {
		opts.MetricsAddr = "0"
	}
	opts.ProbeAddr, opts.WebhookAddr = "0", "0"
	if opts.Workers == 0 {
		opts.Workers = 8
	}
	// Agents get the admin config's CA and URL, not the wrapped transport.
	opts.APIServerURL, opts.APIServerCA = upstream.Config.Host, upstream.Config.CAData
	mgr, err := manager.New(ctx, cfg, opts)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		defer close(m.done)
		_ = mgr.Start(ctx)
	}()
	t.Cleanup(func() { m.stop(t) })
	return m
}

// newWorkspace creates a workspace namespace with a registration token and
// returns the token's values (what `helm install fleet-agent` gets).
func newWorkspace(t *testing.T, ws, token string) registration.Values {
	t.Helper()
	_ = upstream.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ws}})
	return newToken(t, ws, token)
}

func newToken(t *testing.T, ws, token string) registration.Values {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(upstream.Client.Create(ctx, &fleet.ClusterRegistrationToken{
		ObjectMeta: metav1.ObjectMeta{Name: token, Namespace: ws},
		Spec:       fleet.ClusterRegistrationTokenSpec{TTL: &metav1.Duration{Duration: time.Hour}},
	})).To(Succeed())
	var v registration.Values
	g.Eventually(func(g Gomega) {
		s := &corev1.Secret{}
		g.Expect(upstream.Client.Get(ctx, client.ObjectKey{Namespace: ws, Name: token}, s)).To(Succeed())
		g.Expect(yaml.Unmarshal(s.Data["values"], &v)).To(Succeed())
		g.Expect(v.Token).NotTo(BeEmpty())
	}, wait, tick).Should(Succeed())
	return v
}

func bootstrapOf(v registration.Values) *register.Bootstrap {
	return &register.Bootstrap{
		APIServerURL: v.APIServerURL, APIServerCA: []byte(v.APIServerCA), Token: v.Token, TokenName: v.TokenName,
		ClusterNamespace: v.ClusterNamespace, SystemRegistrationNamespace: v.SystemRegistrationNamespace,
	}
}

// startSimulators runs n simulated agents until the returned cancel.
func startSimulators(t *testing.T, v registration.Values, n int, prefix string, labels map[string]string, checkin time.Duration) (*simulator.Simulator, context.CancelFunc) {
	t.Helper()
	sim, err := simulator.New(simulator.Options{
		Count: n, Bootstrap: bootstrapOf(v), Mode: simulator.StatusOnly, ClientIDPrefix: prefix,
		Labels: labels, CheckinInterval: checkin, FirstCheckinDelay: 500 * time.Millisecond,
		RegistrationPollInterval: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = sim.Run(ctx) }()
	stop := func() {
		cancel()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Error("simulators did not stop")
		}
	}
	t.Cleanup(stop)
	return sim, stop
}

// installBootstrap writes what the fleet-agent chart installs downstream:
// the agent namespace, Secret fleet-agent-bootstrap and ConfigMap fleet-agent.
func installBootstrap(t *testing.T, d *testenv.Cluster, ns, clientID string, v registration.Values, labels map[string]string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	_ = d.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	g.Expect(d.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: register.BootstrapSecretName, Namespace: ns},
		Data: map[string][]byte{
			"apiServerURL": []byte(v.APIServerURL), "apiServerCA": []byte(v.APIServerCA), "token": []byte(v.Token),
			"tokenName": []byte(v.TokenName), "clusterNamespace": []byte(v.ClusterNamespace),
			"systemRegistrationNamespace": []byte(v.SystemRegistrationNamespace),
		},
	})).To(Succeed())
	raw, err := yaml.Marshal(register.AgentConfig{ClientID: clientID, Labels: labels})
	g.Expect(err).NotTo(HaveOccurred())
	js, err := yaml.YAMLToJSON(raw)
	g.Expect(err).NotTo(HaveOccurred())
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: register.ConfigMapName, Namespace: ns}, Data: map[string]string{"config": string(js)}}
	if err := d.Client.Create(ctx, cm); err != nil {
		g.Expect(d.Client.Update(ctx, cm)).To(Succeed())
	}
}

// startAgent runs the real agent in-process against d.
func startAgent(t *testing.T, d *rest.Config, ns string, opts agent.Options) (context.CancelFunc, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	opts.Downstream, opts.Namespace = d, ns
	if opts.CheckinInterval == 0 {
		opts.CheckinInterval = 2 * time.Second
	}
	opts.FirstCheckinDelay = 500 * time.Millisecond
	opts.RegistrationPollInterval = 500 * time.Millisecond
	if opts.RetryMin == 0 {
		opts.RetryMin, opts.RetryMax = 500*time.Millisecond, 5*time.Second
	}
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx, opts) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Error("agent did not stop")
		}
	})
	return cancel, done
}

func configMap(name, value string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  value: %q\n", name, value)
}

// putBundle creates or updates a Bundle with one ConfigMap, targeted at
// clusters with the given labels.
func putBundle(t *testing.T, ws, name, value string, match map[string]string, ns string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	g.Eventually(func() error {
		b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name}}
		err := upstream.Client.Get(ctx, client.ObjectKeyFromObject(b), b)
		b.Spec.Resources = []fleet.BundleResource{{Name: "cm.yaml", Content: configMap(name, value)}}
		b.Spec.Targets = []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: match}}}
		b.Spec.DefaultNamespace = ns
		if err != nil {
			return upstream.Client.Create(ctx, b)
		}
		return upstream.Client.Update(ctx, b)
	}, wait, tick).Should(Succeed())
}

// clusters lists the Clusters of ws with the labels.
func clusters(g Gomega, ws string, match map[string]string) []fleet.Cluster {
	list := &fleet.ClusterList{}
	g.Expect(upstream.Client.List(context.Background(), list, client.InNamespace(ws), client.MatchingLabels(match))).To(Succeed())
	return list.Items
}

// waitCheckedIn waits for n Clusters with the labels, each with a namespace
// and a heartbeat.
func waitCheckedIn(t *testing.T, ws string, match map[string]string, n int) []fleet.Cluster {
	t.Helper()
	var out []fleet.Cluster
	NewWithT(t).Eventually(func(g Gomega) {
		out = clusters(g, ws, match)
		g.Expect(out).To(HaveLen(n))
		for _, c := range out {
			g.Expect(c.Status.Namespace).NotTo(BeEmpty(), c.Name)
			g.Expect(c.Status.Agent.LastSeen.IsZero()).To(BeFalse(), c.Name)
		}
	}, wait, tick).Should(Succeed())
	return out
}

// bundleDeployments returns the BundleDeployments of bundle ws/name, by
// cluster name.
func bundleDeployments(g Gomega, ws, name string) map[string]fleet.BundleDeployment {
	list := &fleet.BundleDeploymentList{}
	g.Expect(upstream.Client.List(context.Background(), list, client.MatchingLabels{
		fleet.BundleNamespaceLabel: ws, fleet.BundleLabel: name})).To(Succeed())
	out := map[string]fleet.BundleDeployment{}
	for _, bd := range list.Items {
		out[bd.Labels[fleet.ClusterLabel]] = bd
	}
	return out
}

// deployedID is the deploymentID the Bundle currently asks for.
func deployedID(bd fleet.BundleDeployment) bool {
	return bd.Spec.DeploymentID != "" && bd.Status.AppliedDeploymentID == bd.Spec.DeploymentID && bd.Status.Ready &&
		!meta.IsStatusConditionTrue(bd.Status.Conditions, fleet.ConditionOffline)
}

func isOffline(c fleet.Cluster) bool {
	return c.Status.Display.State == "Offline" && meta.IsStatusConditionTrue(c.Status.Conditions, fleet.ConditionOffline)
}

// since formats a recovery time for the log.
func since(start time.Time) string { return time.Since(start).Round(100 * time.Millisecond).String() }

// apiServerOutage crashes the API server of c (etcd keeps running; the
// restarted server keeps its certificates and keys, so it is the same
// server to its clients) and returns the function that starts it again
// and waits until it is ready.
func apiServerOutage(t *testing.T, c *testenv.Cluster) (restart func()) {
	t.Helper()
	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	started := false
	start := func() {
		if started {
			return
		}
		started = true
		if err := c.StartAPIServer(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(start)
	return start
}

func bundleOf(g Gomega, ws, name string) *fleet.Bundle {
	b := &fleet.Bundle{}
	g.Expect(upstream.Client.Get(context.Background(), client.ObjectKey{Namespace: ws, Name: name}, b)).To(Succeed())
	return b
}
