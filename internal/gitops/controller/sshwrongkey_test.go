package controller_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// TestSSHWrongClientKeyStalls: a GitRepo cloned over SSH with a key the
// server does not accept is Stalled (bad credentials, docs/gitops.md), not
// Reconciling "retrying" forever, with a message that says the key was
// refused and holds no key material, in its conditions and events alike.
func TestSSHWrongClientKeyStalls(t *testing.T) {
	ns := newNamespace(t, "ssh-wrong-key")
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	repo.Commit("master", map[string]string{"cm.yaml": configMap("a", "1")})
	srv := gittest.NewSSHServer(t, root)
	wrongKey, _ := gittest.NewKeyPEM(t)
	secret(t, ns, "wrong-key", corev1.SecretTypeSSHAuth, map[string][]byte{
		corev1.SSHAuthPrivateKey: wrongKey, "known_hosts": srv.KnownHosts,
	})

	createRepo(t, ns, "wrong-key", fleet.GitRepoSpec{Repo: srv.URLFor(repo), ClientSecretName: "wrong-key"})
	waitStalled(t, ns, "wrong-key", fleet.ConditionGitPolling, "the SSH server did not accept the private key")
	r := getRepo(t, ns, "wrong-key")
	if c := condition(r, fleet.ConditionReconciling); c == nil || c.Status != metav1.ConditionFalse {
		t.Fatalf("reconciling = %+v, want False", c)
	}
	if c := condition(r, fleet.ConditionReady); c == nil || c.Status != metav1.ConditionFalse {
		t.Fatalf("ready = %+v, want False", c)
	}
	for _, c := range r.Status.Conditions {
		noKeyIn(t, "condition "+c.Type, c.Message, wrongKey)
	}
	noKeyIn(t, "display", r.Status.Display.Message, wrongKey)
	if n := len(bundlesOf(t, ns, "wrong-key")); n != 0 {
		t.Fatalf("a refused key produced %d bundles", n)
	}
	fleettest.Eventually(t, timeout, func() error {
		var evs eventsv1.EventList
		if err := env.Client.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == "wrong-key" && e.Reason == "PollFailed" {
				noKeyIn(t, "event", e.Note, wrongKey)
				return nil
			}
		}
		return fmt.Errorf("no PollFailed event among %d", len(evs.Items))
	})
}
