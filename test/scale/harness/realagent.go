package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/internal/version"
)

// realAgent is one real fleet-agent process (cmd/fleet-agent, built by the
// harness), registered like any cluster, to measure a real agent's idle
// footprint next to the simulated ones. It is not targeted by the
// scenario's bundles (it has no simulator label).
const realAgentLabel = "real-agent"

type realAgent struct {
	cmd    *exec.Cmd
	exited chan error
}

func startRealAgent(ctx context.Context, dir string, down *testenv.Cluster, b *register.Bootstrap, checkin time.Duration) (*realAgent, error) {
	bin, err := buildAgent(ctx, dir)
	if err != nil {
		return nil, err
	}
	const ns = "cattle-fleet-system"
	if err := prepareAgentNamespace(ctx, down, ns, b, map[string]any{"labels": map[string]string{realAgentLabel: "true"}}); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "real-agent.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--kubeconfig", down.Kubeconfig, "--namespace", ns, "--checkin-interval", checkin.String())
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	a := &realAgent{cmd: cmd, exited: make(chan error, 1)}
	go func() { a.exited <- cmd.Wait(); _ = logf.Close() }()
	return a, nil
}

// buildAgent builds cmd/fleet-agent into dir.
func buildAgent(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "fleet-agent")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	build := exec.CommandContext(ctx, "go", "build", "-tags", version.BuildTags, "-o", bin, "./cmd/fleet-agent")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building fleet-agent: %v: %s", err, out)
	}
	return bin, nil
}

// prepareAgentNamespace writes what the fleet-agent chart would: the
// bootstrap Secret and the agent ConfigMap.
func prepareAgentNamespace(ctx context.Context, down *testenv.Cluster, ns string, b *register.Bootstrap, config map[string]any) error {
	if err := down.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	cfg, _ := json.Marshal(config)
	objs := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: register.BootstrapSecretName, Namespace: ns}, Data: map[string][]byte{
			"apiServerURL": []byte(b.APIServerURL), "apiServerCA": b.APIServerCA, "token": []byte(b.Token),
			"tokenName": []byte(b.TokenName), "clusterNamespace": []byte(b.ClusterNamespace),
			"systemRegistrationNamespace": []byte(b.SystemRegistrationNamespace)}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: register.ConfigMapName, Namespace: ns}, Data: map[string]string{"config": string(cfg)}},
	}
	for _, o := range objs {
		if err := down.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// startSimulatorsBinary runs `fleet-agent --simulators N` as the agents
// process (its per-cluster memory then includes the process baseline).
func startSimulatorsBinary(ctx context.Context, dir string, down *testenv.Cluster, kubeconfig string, b *register.Bootstrap, sc Scenario, checkin time.Duration) (*child, error) {
	bin, err := buildAgent(ctx, dir)
	if err != nil {
		return nil, err
	}
	const ns = "fleet-simulators"
	if err := prepareAgentNamespace(ctx, down, ns, b, map[string]any{"clientID": "scale-" + sc.Name}); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--kubeconfig", kubeconfig, "--namespace", ns, "--checkin-interval", checkin.String(),
		"--simulators", fmt.Sprint(sc.Clusters), "--simulate-apply", string(sc.Mode))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return startProcess("agents", dir, cmd, false)
}

func (a *realAgent) stop() {
	if a == nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(15 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.exited
	}
}
