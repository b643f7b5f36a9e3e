package install_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// Four independent API servers, all without Fleet CRDs: the manager
// cluster (the fleet-crd chart installs them), a downstream cluster for the
// agent chart, a second downstream cluster for `fleet install agent-token`
// output, and a fresh cluster for `fleet install controller` output.
var (
	upstream, downstream, downstream2, fresh *testenv.Cluster
	helmHome                                 string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if helmHome, err = os.MkdirTemp("", "fleet-install-helm-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(helmHome)
	clusters, err := testenv.StartMany("install", 4, testenv.Options{WithoutCRDs: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		for _, c := range clusters {
			_ = c.Stop()
		}
	}()
	upstream, downstream, downstream2, fresh = clusters[0], clusters[1], clusters[2], clusters[3]
	code := m.Run()
	stopManager()
	return code
}

// helmBin is the helm CLI built by `make tools` ($FLEET_HELM_BIN, exported
// by the Makefile, or bin/helm).
func helmBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("FLEET_HELM_BIN")
	if bin == "" {
		bin = filepath.Join(testenv.RepoRoot(), "bin", "helm")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("helm CLI not found at %s: run 'make tools'", bin)
	}
	return bin
}

// helm runs the real helm CLI from the repository root with an isolated
// HELM_*_HOME; it returns stdout, and stderr folded into the error.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helmBin(t), args...)
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(helmHome, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(helmHome, "config"),
		"HELM_DATA_HOME="+filepath.Join(helmHome, "data"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %v: %w: %s", args, err, stderr.String())
	}
	return stdout.String(), nil
}

var (
	managerOnce sync.Once
	managerErr  error
)

// installManagerChart installs fleet-crd and fleet into the upstream
// cluster with helm, once per test binary.
func installManagerChart(t *testing.T) {
	t.Helper()
	managerOnce.Do(func() {
		if _, managerErr = helm(t, "--kubeconfig", upstream.Kubeconfig, "-n", "cattle-fleet-system",
			"install", "--create-namespace", "fleet-crd", "charts/fleet-crd"); managerErr != nil {
			return
		}
		_, managerErr = helm(t, "--kubeconfig", upstream.Kubeconfig, "-n", "cattle-fleet-system",
			"install", "fleet", "charts/fleet", "--set", "apiServerURL="+upstream.Config.Host)
	})
	if managerErr != nil {
		t.Fatalf("installing the manager charts: %v", managerErr)
	}
}

// eventually polls f until it returns nil or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	fleettest.Eventually(t, timeout, f)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
