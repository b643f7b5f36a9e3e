package simulator_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/agent/simulator"
	"github.com/fleetgo/fleet/internal/manager"
	"github.com/fleetgo/fleet/internal/registration"
	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// upstream is the manager cluster, booted once for the package. The
// simulated agents here run in status-only mode: they touch no downstream
// cluster, so none is started.
var upstream *testenv.Cluster

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapcore.ErrorLevel)))
	var err error
	if upstream, err = testenv.Start(testenv.Options{Name: "simulator-upstream"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := fleettest.CreateSystemNamespaces(context.Background(), upstream.Client); err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = upstream.Stop()
		os.Exit(1)
	}
	code := m.Run()
	_ = upstream.Stop()
	os.Exit(code)
}

// TestSimulatedAgentReportsCheckinInterval: a manager whose
// agentCheckinInterval is 1s (Offline after 3s) and a simulated agent
// checking in every 5s. Like a real agent (heartbeat package,
// TestAgentIntervalLongerThanManagers), the simulated one reports its
// interval on its Cluster (status.agent.checkinInterval), and the manager
// holds the cluster to it: over several check-ins the Cluster never shows
// Offline and no ClusterOffline event is recorded. Before simulated agents
// reported it, the manager fell back to its own threshold and took each of
// them to be Offline 3s after every check-in — in a scale run with a
// check-in interval longer than the manager's, every simulated cluster
// flapped.
func TestSimulatedAgentReportsCheckinInterval(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ws, interval = "sim-checkin", 5 * time.Second
	mgr, err := manager.New(ctx, upstream.Config, manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", WebhookAddr: "0",
		AgentCheckinInterval: time.Second, Workers: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	mgrDone := make(chan struct{})
	go func() { defer close(mgrDone); _ = mgr.Start(ctx) }()
	defer func() { cancel(); <-mgrDone }()
	if err := upstream.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ws}}); err != nil {
		t.Fatal(err)
	}
	values := registrationValues(ctx, t, ws, "sim-token")

	sim, err := simulator.New(simulator.Options{
		Count: 1, Mode: simulator.StatusOnly, ClientIDPrefix: "checkin",
		Bootstrap: &register.Bootstrap{
			APIServerURL: values.APIServerURL, APIServerCA: []byte(values.APIServerCA), Token: values.Token,
			TokenName: values.TokenName, ClusterNamespace: values.ClusterNamespace,
			SystemRegistrationNamespace: values.SystemRegistrationNamespace,
		},
		CheckinInterval: interval, FirstCheckinDelay: 500 * time.Millisecond,
		RegistrationPollInterval: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	simDone := make(chan struct{})
	go func() { defer close(simDone); _ = sim.Run(ctx) }()
	defer func() { cancel(); <-simDone }()

	// Several check-ins from the first one, each interval longer than the
	// manager's threshold of 3s.
	fleettest.ExpectOnlineCheckIns(ctx, t, upstream, fleettest.CheckIns{
		Workspace: ws, Interval: interval, Count: 3,
	})
}

// registrationValues creates registration token ws/name and returns its
// values, what `helm install fleet-agent` gets.
func registrationValues(ctx context.Context, t *testing.T, ws, name string) registration.Values {
	t.Helper()
	if err := upstream.Client.Create(ctx, &fleet.ClusterRegistrationToken{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ws},
		Spec:       fleet.ClusterRegistrationTokenSpec{TTL: &metav1.Duration{Duration: time.Hour}},
	}); err != nil {
		t.Fatal(err)
	}
	var v registration.Values
	fleettest.Eventually(t, time.Minute, func() error {
		s := &corev1.Secret{}
		if err := upstream.Client.Get(ctx, client.ObjectKey{Namespace: ws, Name: name}, s); err != nil {
			return err
		}
		if err := yaml.Unmarshal(s.Data["values"], &v); err != nil {
			return err
		}
		if v.Token == "" {
			return fmt.Errorf("token values have no token yet")
		}
		return nil
	})
	return v
}
