package registration_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/registration"
	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// One upstream (manager) and two downstream clusters, all separate API
// servers, shared by every test of the package.
var (
	up   *testenv.Cluster
	down []*testenv.Cluster
	// creds is the manager's content API credential hand-over, called
	// directly (no aggregation layer serves it here, so agents in this
	// package ask for Secrets, as with a manager without the content API).
	creds = registration.NewCredentials()
)

const (
	workspace = "clusters"
	timeout   = 90 * time.Second
	// optsWorkspace is left to a second manager, with the options that are
	// off in the shared one turned on (options_test.go): the shared
	// manager does not see it.
	optsWorkspace = "ws-opts"
)

// optsManager are the options of the manager of optsWorkspace.
var optsManager = registration.Options{RegistrationTokenTTLRequired: true, IgnoreClusterRegistrationLabels: true, APIServerURLDefaulted: true,
	AgentCheckinInterval: 5 * time.Minute}

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapLevel())))
	os.Exit(run(m))
}

// zapLevel is Info with TEST_VERBOSE set, else Error.
func zapLevel() zapcore.Level {
	if os.Getenv("TEST_VERBOSE") != "" {
		return zapcore.InfoLevel
	}
	return zapcore.ErrorLevel
}

func run(m *testing.M) int {
	var wg sync.WaitGroup
	var upErr, downErr error
	wg.Add(2)
	go func() { defer wg.Done(); up, upErr = testenv.Start(testenv.Options{Name: "reg-up"}) }()
	go func() {
		defer wg.Done()
		down, downErr = testenv.StartMany("reg-down", 2, testenv.Options{WithoutCRDs: true})
	}()
	wg.Wait()
	if err := errors.Join(upErr, downErr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		_ = up.Stop()
		for _, d := range down {
			_ = d.Stop()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, ns := range []string{workspace, fleet.DefaultSystemRegistrationNamespace, "ws-a", optsWorkspace, imageWorkspace, collideWorkspaceA, collideWorkspaceB, localOffNamespace} {
		if err := up.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	// The shared manager leaves optsWorkspace alone: its cache holds only
	// objects there with a label none has.
	never, _ := labels.Parse("fleet-test/never=true")
	opts := registration.Options{
		APIServerURL:       up.Config.Host,
		APIServerCA:        up.Config.CAData,
		BootstrapNamespace: fleet.BootstrapNamespace,
		Workers:            4,
		Credentials:        creds,
	}
	done, err := startManager(ctx, opts, map[string]cache.Config{cache.AllNamespaces: {}, optsWorkspace: {LabelSelector: never},
		imageWorkspace: {LabelSelector: never}, localOffNamespace: {LabelSelector: never}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	other := optsManager
	other.APIServerURL, other.APIServerCA, other.Workers = up.Config.Host, up.Config.CAData, 2
	optsDone, err := startManager(ctx, other, map[string]cache.Config{optsWorkspace: {}})
	if err != nil {
		cancel()
		<-done
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	cancel()
	<-done
	<-optsDone
	return code
}

// startManager runs the registration controllers with opts against up,
// caching the namespaces given; the content API's credential hand-over
// (creds) is set up when opts asks for it. The channel closes when the
// manager has stopped (ctx ended).
func startManager(ctx context.Context, opts registration.Options, namespaces map[string]cache.Config) (<-chan struct{}, error) {
	mgr, err := ctrl.NewManager(up.Config, ctrl.Options{
		Scheme:                 testenv.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:                  cache.Options{DefaultNamespaces: namespaces},
	})
	if err == nil && opts.Credentials != nil {
		err = opts.Credentials.Setup(ctx, mgr, opts)
	}
	if err == nil {
		err = registration.Setup(ctx, mgr, opts)
	}
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	return done, nil
}

// eventually polls fn until it returns nil or the timeout passes.
func eventually(t *testing.T, what string, fn func() error) {
	t.Helper()
	fleettest.Eventually(t, timeout, func() error {
		if err := fn(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
}

// newToken creates a ClusterRegistrationToken and returns the values.yaml
// its Secret holds, as a user would read it.
func newToken(t *testing.T, ns, name string, ttl time.Duration) registration.Values {
	t.Helper()
	ctx := context.Background()
	tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if ttl != 0 {
		tok.Spec.TTL = &metav1.Duration{Duration: ttl}
	}
	if err := up.Client.Create(ctx, tok); err != nil {
		t.Fatal(err)
	}
	var v registration.Values
	eventually(t, "token values secret", func() error {
		s := &corev1.Secret{}
		if err := up.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
			return err
		}
		return yaml.Unmarshal(s.Data["values"], &v)
	})
	return v
}

// installBootstrap does what `helm install fleet-agent` does with the
// values: the agent namespace, Secret fleet-agent-bootstrap and ConfigMap
// fleet-agent.
func installBootstrap(t *testing.T, d *testenv.Cluster, ns string, v registration.Values, cfg register.AgentConfig) {
	t.Helper()
	ctx := context.Background()
	_ = d.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: register.BootstrapSecretName, Namespace: ns}, Data: map[string][]byte{
		"apiServerURL": []byte(v.APIServerURL), "apiServerCA": []byte(v.APIServerCA), "token": []byte(v.Token),
		"tokenName": []byte(v.TokenName), "clusterNamespace": []byte(v.ClusterNamespace),
		"systemRegistrationNamespace": []byte(v.SystemRegistrationNamespace),
	}}
	if err := d.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	raw, _ := yaml.Marshal(cfg)
	js, _ := yaml.YAMLToJSON(raw)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: register.ConfigMapName, Namespace: ns}, Data: map[string]string{"config": string(js)}}
	if err := d.Client.Create(ctx, cm); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		if err := d.Client.Update(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
}

// startAgent runs the real agent in-process against d, with short intervals.
func startAgent(t *testing.T, d *testenv.Cluster, ns string, mutate ...func(*agent.Options)) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctrl.LoggerInto(context.Background(), ctrl.Log.WithName(d.Name+"/"+ns)))
	opts := agent.Options{
		Downstream: d.Config, Namespace: ns, CheckinInterval: 2 * time.Second, FirstCheckinDelay: 100 * time.Millisecond,
		Workers: 2, RetryMin: 200 * time.Millisecond, RetryMax: 2 * time.Second, RegistrationPollInterval: 200 * time.Millisecond,
	}
	for _, m := range mutate {
		m(&opts)
	}
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx, opts) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("agent returned %v", err)
				}
			case <-time.After(60 * time.Second):
				t.Errorf("agent did not stop within 60s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// agentConfig is the upstream credential the agent stored downstream.
func agentConfig(t *testing.T, d *testenv.Cluster, ns string) (*rest.Config, map[string][]byte) {
	t.Helper()
	s := &corev1.Secret{}
	if err := d.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: register.AgentSecretName}, s); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[register.KeyKubeconfig])
	if err != nil {
		t.Fatal(err)
	}
	return cfg, s.Data
}

func clientFor(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func tokenConfig(v registration.Values) *rest.Config {
	return &rest.Config{Host: v.APIServerURL, TLSClientConfig: rest.TLSClientConfig{CAData: []byte(v.APIServerCA)}, BearerToken: v.Token}
}

// clustersByClientID lists the Clusters (all namespaces) with clientID.
func clustersByClientID(t *testing.T, id string) []fleet.Cluster {
	t.Helper()
	var list fleet.ClusterList
	if err := up.Client.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	var out []fleet.Cluster
	for _, c := range list.Items {
		if c.Spec.ClientID == id {
			out = append(out, c)
		}
	}
	return out
}

func kubeSystemUID(t *testing.T, d *testenv.Cluster) string {
	t.Helper()
	id, err := d.KubeSystemUID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// wantForbidden asserts the API server refused err with 403.
func wantForbidden(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s: want 403 Forbidden, got %v", what, err)
	}
}

// wantUnauthorized asserts the API server refused err with 401.
func wantUnauthorized(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsUnauthorized(err) {
		t.Errorf("%s: want 401 Unauthorized, got %v", what, err)
	}
}

// terminatingClusterNamespace creates the namespace of clientID's cluster
// and deletes it. No namespace controller runs here, so it stays
// Terminating, and a grant stops before the credential, which it cannot
// write there.
func terminatingClusterNamespace(t *testing.T, ctx context.Context, clientID string) string {
	t.Helper()
	cluster := names.ClusterNameForClientID(clientID)
	clusterNS := names.ClusterNamespace(workspace, cluster)
	// Left by an earlier Cluster of that name: the new one may take it.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clusterNS, Labels: map[string]string{fleet.ManagedLabel: "true"},
		Annotations: map[string]string{fleet.ClusterNamespaceLabel: workspace, fleet.ClusterLabel: cluster}}}
	if err := up.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := up.Client.Delete(ctx, ns); err != nil {
		t.Fatal(err)
	}
	return clusterNS
}
