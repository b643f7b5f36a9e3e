package controller_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// chartOf is the version and ConfigMap template of the one Bundle of a
// GitRepo, which the agents deploy; "" when it has no chart stored inside.
func chartOf(t *testing.T, ns, repo string) (string, string) {
	t.Helper()
	for _, b := range bundlesOf(t, ns, repo) {
		if h := b.Spec.Helm; h != nil && strings.HasPrefix(h.Chart, ".chart/") {
			return h.Version, resourceContent(b, h.Chart+"/templates/cm.yaml")
		}
	}
	return "", ""
}

// noKeyIn fails when s holds a line of key.
func noKeyIn(t *testing.T, what, s string, key []byte) {
	t.Helper()
	for _, line := range strings.Split(string(key), "\n") {
		if len(line) > 8 && strings.Contains(s, line) {
			t.Fatalf("%s holds key material: %s", what, s)
		}
	}
}

// TestHelmSecretSSHKey: a GitRepo whose helmSecretName holds ssh-privatekey
// gets the Bundle of a git:: chart on an SSH server, the server verified
// against the helm secret's known_hosts or, without one, the client
// secret's; per-path credentials take sshPrivateKey (Fleet's
// secrets-path.yaml). A wrong key stalls the GitRepo with a message, and
// events, free of key material.
func TestHelmSecretSSHKey(t *testing.T) {
	ns := newNamespace(t, "helm-ssh")
	root := t.TempDir()
	charts := gittest.NewRepo(t, root, "charts")
	charts.Commit("master", map[string]string{
		"app/Chart.yaml":        "apiVersion: v2\nname: app\nversion: 1.0.0\n",
		"app/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  v: from-ssh\n",
	})
	srv := gittest.NewSSHServer(t, root)
	other := gittest.NewSSHServer(t, t.TempDir())
	apps := gittest.NewRepo(t, root, "apps")
	c1 := apps.Commit("master", map[string]string{"fleet.yaml": "helm:\n  chart: git::" + srv.URLFor(charts) + "//app\n"})
	https := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})

	secret(t, ns, "helm-ssh", corev1.SecretTypeSSHAuth, map[string][]byte{
		corev1.SSHAuthPrivateKey: srv.ClientKeyPEM, "known_hosts": srv.KnownHosts,
	})
	secret(t, ns, "helm-key-only", corev1.SecretTypeOpaque, map[string][]byte{corev1.SSHAuthPrivateKey: srv.ClientKeyPEM})
	secret(t, ns, "clone-ssh", corev1.SecretTypeSSHAuth, map[string][]byte{
		corev1.SSHAuthPrivateKey: srv.ClientKeyPEM, "known_hosts": srv.KnownHosts,
	})
	secret(t, ns, "helm-by-path", corev1.SecretTypeOpaque, map[string][]byte{
		"secrets-path.yaml": []byte(".:\n  sshPrivateKey: " + base64.StdEncoding.EncodeToString(srv.ClientKeyPEM) + "\n"),
	})
	secret(t, ns, "helm-wrong", corev1.SecretTypeSSHAuth, map[string][]byte{
		corev1.SSHAuthPrivateKey: other.ClientKeyPEM, "known_hosts": srv.KnownHosts,
	})

	for name, spec := range map[string]fleet.GitRepoSpec{
		// Cloned over HTTP: known_hosts from the helm secret.
		"helm-secret": {Repo: https.URLFor(apps), HelmSecretName: "helm-ssh"},
		// Cloned over SSH: the helm secret has only the key, the client
		// secret's known_hosts verify the chart's server too.
		"client-known-hosts": {Repo: srv.URLFor(apps), ClientSecretName: "clone-ssh", HelmSecretName: "helm-key-only"},
		"by-path":            {Repo: srv.URLFor(apps), ClientSecretName: "clone-ssh", HelmSecretNameForPaths: "helm-by-path"},
	} {
		createRepo(t, ns, name, spec)
		waitSynced(t, ns, name, c1, 1)
		if version, cm := chartOf(t, ns, name); version != "1.0.0" || !strings.Contains(cm, "v: from-ssh") {
			t.Errorf("%s: chart %q %q, want 1.0.0 from the SSH repository", name, version, cm)
		}
	}

	createRepo(t, ns, "wrong-key", fleet.GitRepoSpec{Repo: https.URLFor(apps), HelmSecretName: "helm-wrong"})
	waitStalled(t, ns, "wrong-key", fleet.ConditionReady, "unable to authenticate")
	if n := len(bundlesOf(t, ns, "wrong-key")); n != 0 {
		t.Fatalf("a wrong key produced %d bundles", n)
	}
	for _, c := range getRepo(t, ns, "wrong-key").Status.Conditions {
		noKeyIn(t, "condition "+c.Type, c.Message, other.ClientKeyPEM)
	}
	fleettest.Eventually(t, timeout, func() error {
		var evs eventsv1.EventList
		if err := env.Client.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == "wrong-key" && e.Reason == "BuildFailed" {
				noKeyIn(t, "event", e.Note, other.ClientKeyPEM)
				return nil
			}
		}
		return fmt.Errorf("no BuildFailed event among %d", len(evs.Items))
	})
	if s := condition(getRepo(t, ns, "wrong-key"), fleet.ConditionStalled); s == nil || s.Status != metav1.ConditionTrue {
		t.Fatalf("stalled = %+v", s)
	}
}
