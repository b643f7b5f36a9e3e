package registration_test

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/internal/version"
)

// TestAgentBinary runs the real fleet-agent command out of cluster
// (--kubeconfig) and stops it with SIGTERM: it must exit 0.
func TestAgentBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the fleet-agent binary")
	}
	bin := filepath.Join(t.TempDir(), "fleet-agent")
	build := exec.Command("go", "build", "-tags", version.BuildTags, "-o", bin, "./cmd/fleet-agent")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	const ns = "binary-agent"
	if err := down[0].Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "--kubeconfig", down[0].Kubeconfig, "--namespace", ns, "--checkin-interval", "5s", "--leader-elect=false")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// It finds no bootstrap secret and says so downstream.
	waitEvent(t, down[0], ns, "RegistrationFailed", "no fleet-agent-bootstrap secret")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("fleet-agent exited with %v after SIGTERM\n%s", err, out.String())
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("fleet-agent did not stop within 60s of SIGTERM\n%s", out.String())
	}
}
