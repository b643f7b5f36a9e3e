package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestStatusWithoutKubeconfig: with no --kubeconfig, no KUBECONFIG and no
// ~/.kube/config, status names the ways to give one (and the quickstart's),
// not client-go's "try setting KUBERNETES_MASTER".
func TestStatusWithoutKubeconfig(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_MASTER", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	_, _, err := runFleet(t, t.TempDir(), "", "status", "--once")
	if err == nil {
		t.Fatal("status without any kubeconfig worked")
	}
	for _, want := range []string{"--kubeconfig", "KUBECONFIG", ".fleet-dev/upstream/kubeconfig"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "KUBERNETES_MASTER") {
		t.Errorf("error still suggests KUBERNETES_MASTER: %v", err)
	}

	// KUBECONFIG naming a file that is not there (a relative path exported
	// elsewhere): client-go skips it; the error says so rather than that
	// KUBECONFIG is unset.
	t.Setenv("KUBECONFIG", ".fleet-dev/upstream/kubeconfig")
	_, _, err = runFleet(t, t.TempDir(), "", "status", "--once")
	if err == nil || !strings.Contains(err.Error(), "KUBECONFIG=.fleet-dev/upstream/kubeconfig names no existing file") {
		t.Errorf("status with KUBECONFIG naming a missing file: %v", err)
	}
}

// TestStatusNamesTheWorkspace: status of the default workspace names it,
// and when it holds nothing, names the workspaces that do, over a real API
// server.
func TestStatusNamesTheWorkspace(t *testing.T) {
	m := startManager(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, ns := range []string{"status-team-a", "status-empty"} {
		if err := m.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	gr := &fleet.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "apps", Namespace: "status-team-a"}, Spec: fleet.GitRepoSpec{Repo: "https://example.com/apps"}}
	if err := m.Client.Create(ctx, gr); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	out, _, err := runFleet(t, t.TempDir(), "", "status", "--once", "--kubeconfig", m.Kubeconfig, "-n", "status-empty")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"FLEET  workspace status-empty: 0/0", "Workspace status-empty has no Clusters, GitRepos or HelmOps.", "status-team-a"} {
		if !strings.Contains(out, want) {
			t.Errorf("status -n status-empty lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "No problems.") {
		t.Errorf("an empty workspace still says \"No problems.\":\n%s", out)
	}
	out, _, err = runFleet(t, t.TempDir(), "", "status", "--once", "--kubeconfig", m.Kubeconfig, "-n", "status-team-a")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "FLEET  workspace status-team-a:") || !strings.Contains(out, "GitRepo status-team-a/apps") {
		t.Errorf("status -n status-team-a:\n%s", out)
	}
}
