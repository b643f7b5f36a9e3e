package controller_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// TestHelmGitChartKnownHostsFromConfigMap: a GitRepo cloned over HTTPS
// (so without known_hosts of its own) whose helm Secret holds only the SSH
// key gets a git:: chart over SSH verified against the manager's
// known-hosts ConfigMap, the same source its clone would use, as Rancher
// Fleet does; a server missing from it stalls the GitRepo with a message
// naming the server, and so does having no known_hosts at all.
func TestHelmGitChartKnownHostsFromConfigMap(t *testing.T) {
	ns := newNamespace(t, "helm-known-hosts")
	root := t.TempDir()
	charts := gittest.NewRepo(t, root, "charts")
	charts.Commit("master", map[string]string{
		"app/Chart.yaml":        "apiVersion: v2\nname: app\nversion: 1.0.0\n",
		"app/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  v: from-ssh\n",
	})
	srv := gittest.NewSSHServer(t, root)
	apps := gittest.NewRepo(t, root, "apps")
	c1 := apps.Commit("master", map[string]string{"fleet.yaml": "helm:\n  chart: git::" + srv.URLFor(charts) + "//app\n"})
	https := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	secret(t, ns, "helm-key-only", corev1.SecretTypeSSHAuth, map[string][]byte{corev1.SSHAuthPrivateKey: srv.ClientKeyPEM})
	spec := fleet.GitRepoSpec{Repo: https.URLFor(apps), HelmSecretName: "helm-key-only"}

	createRepo(t, ns, "no-known-hosts", spec)
	waitStalled(t, ns, "no-known-hosts", fleet.ConditionReady, "needs known_hosts to verify the SSH server "+srv.Addr)

	github := fleettest.GitHubKnownHosts
	fleettest.SetKnownHostsConfigMap(t, env.Client, systemNamespace, github)
	createRepo(t, ns, "host-not-listed", spec)
	waitStalled(t, ns, "host-not-listed", fleet.ConditionReady, "SSH server "+srv.Addr+" is not in known_hosts")

	fleettest.SetKnownHostsConfigMap(t, env.Client, systemNamespace, github+string(srv.KnownHosts))
	createRepo(t, ns, "from-configmap", spec)
	waitSynced(t, ns, "from-configmap", c1, 1)
	if version, cm := chartOf(t, ns, "from-configmap"); version != "1.0.0" || !strings.Contains(cm, "v: from-ssh") {
		t.Errorf("chart %q %q, want 1.0.0 from the SSH repository", version, cm)
	}
	for _, name := range []string{"no-known-hosts", "host-not-listed"} {
		if n := len(bundlesOf(t, ns, name)); n != 0 {
			t.Errorf("%s produced %d bundles", name, n)
		}
		for _, c := range getRepo(t, ns, name).Status.Conditions {
			noKeyIn(t, name+" condition "+c.Type, c.Message, srv.ClientKeyPEM)
		}
	}
}
