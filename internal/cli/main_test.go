package cli

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/registration"
	"github.com/fleetgo/fleet/internal/testenv"
)

// The manager's address as the fleet-controller was installed with it, which
// is not the address of the test's kubeconfig (127.0.0.1, as through a
// tunnel), and its CA.
const (
	managerURL = "https://fleet.example.com:6443"
	managerCA  = "-----BEGIN CERTIFICATE-----\nTUFOQUdFUi1DQQ==\n-----END CERTIFICATE-----\n"
)

// The manager cluster, started by the first test that needs it (most tests
// of the package need none) and stopped by TestMain.
var (
	managerOnce   sync.Once
	managerErr    error
	managerEnv    *testenv.Cluster
	managerCancel context.CancelFunc
	managerDone   = make(chan struct{})
)

func TestMain(m *testing.M) {
	level := zapcore.ErrorLevel
	if os.Getenv("TEST_VERBOSE") != "" {
		level = zapcore.InfoLevel
	}
	ctrl.SetLogger(zap.New(zap.Level(level)))
	code := m.Run()
	if managerCancel != nil {
		managerCancel()
		<-managerDone
	}
	if managerEnv != nil {
		_ = managerEnv.Stop()
	}
	os.Exit(code)
}

// startManager boots an API server with the Fleet CRDs and runs the
// manager's registration controllers against it, which issue token values
// with managerURL and managerCA.
func startManager(t *testing.T) *testenv.Cluster {
	t.Helper()
	managerOnce.Do(func() {
		if managerEnv, managerErr = testenv.Start(testenv.Options{Name: "cli"}); managerErr != nil {
			close(managerDone)
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		for _, ns := range []string{fleet.DefaultSystemRegistrationNamespace} {
			if managerErr = managerEnv.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); managerErr != nil {
				cancel()
				close(managerDone)
				return
			}
		}
		mgr, err := ctrl.NewManager(managerEnv.Config, ctrl.Options{
			Scheme:                 testenv.Scheme,
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
			Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		})
		if err == nil {
			err = registration.Setup(ctx, mgr, registration.Options{
				APIServerURL: managerURL, APIServerCA: []byte(managerCA), Workers: 2,
			})
		}
		if err != nil {
			cancel()
			close(managerDone)
			managerErr = err
			return
		}
		managerCancel = cancel
		go func() {
			defer close(managerDone)
			if err := mgr.Start(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "manager:", err)
			}
		}()
	})
	if managerErr != nil {
		t.Fatalf("starting the manager cluster: %v", managerErr)
	}
	return managerEnv
}

// newWorkspace creates a namespace of its own for a test.
func newWorkspace(t *testing.T, env *testenv.Cluster, name string) string {
	t.Helper()
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// eventually polls f until it returns nil or timeout passes.
func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not met after %s: %v", timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
