package helmop_test

import (
	"context"
	"fmt"
	"net"
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

// chartRepo is a git repository holding chart "app" 1.0.0 under
// charts/app at tag v1.0.0 (and 1.1.0 on master after it).
func chartRepo(t *testing.T, root, name string) *gittest.Repo {
	t.Helper()
	repo := gittest.NewRepo(t, root, name)
	repo.Commit("master", map[string]string{
		"charts/app/Chart.yaml":        "apiVersion: v2\nname: app\nversion: 1.0.0\n",
		"charts/app/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  from: git\n",
	})
	repo.Tag("v1.0.0")
	repo.Commit("master", map[string]string{"charts/app/Chart.yaml": "apiVersion: v2\nname: app\nversion: 1.1.0\n"})
	return repo
}

func gitOp(ns, name, chart, secret string) *fleet.HelmOp {
	return &fleet.HelmOp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: fleet.HelmOpSpec{
			BundleSpec: fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{
				DefaultNamespace: "app",
				Helm:             &fleet.HelmOptions{Chart: chart},
			}},
			HelmSecretName: secret,
		},
	}
}

// deployedFromGit fails until the HelmOp is Accepted and its Bundle holds
// the chart of tag v1.0.0.
func deployedFromGit(t *testing.T, ns, name string) error {
	got := getOp(t, ns, name)
	if c := condition(got, fleet.ConditionAccepted); c == nil || c.Status != metav1.ConditionTrue {
		return fmt.Errorf("%s: accepted = %+v", name, c)
	}
	if got.Status.Version != "1.0.0" {
		ready := condition(got, fleet.ConditionReady)
		return fmt.Errorf("%s: status version %q, ready = %+v", name, got.Status.Version, ready)
	}
	b := bundleOf(t, ns, name)
	if b == nil || b.Spec.Helm == nil || b.Spec.Helm.Version != "1.0.0" || !strings.Contains(chartContent(b, "templates/cm.yaml"), "from: git") {
		return fmt.Errorf("%s: bundle %+v", name, b)
	}
	return nil
}

// noSecretIn fails the test when a condition of the HelmOps or an event of
// ns holds any line of secret: statuses and events are readable by many.
func noSecretIn(t *testing.T, ns string, names []string, secret []byte) {
	t.Helper()
	leaks := func(msg string) bool {
		for _, line := range strings.Split(string(secret), "\n") {
			if len(line) > 8 && !strings.HasPrefix(line, "-----") && strings.Contains(msg, line) {
				return true
			}
		}
		return strings.Contains(msg, "PRIVATE KEY-----")
	}
	for _, name := range names {
		for _, c := range getOp(t, ns, name).Status.Conditions {
			if leaks(c.Message) {
				t.Errorf("%s condition %s leaks the secret: %s", name, c.Type, c.Message)
			}
		}
	}
	var evs eventsv1.EventList
	if err := env.Client.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if leaks(e.Note) {
			t.Errorf("event leaks the secret: %s", e.Note)
		}
	}
}

// TestHelmOpChartFromGitOverSSH: a HelmOp whose chart is a git:: source on
// an SSH server, as an ssh:// URL with its git@ user or in scp form
// (git@host:port:path, go-git's scp form with a port), deploys the chart
// with the ssh-privatekey and known_hosts of its helm Secret: the helm
// credentials are scoped to the chart's own host, whose URL carries a
// user. Without the key the build is refused for that reason, and the key
// never reaches a condition or an event.
func TestHelmOpChartFromGitOverSSH(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "gitssh")
	root := t.TempDir()
	repo := chartRepo(t, root, "charts")
	srv := gittest.NewSSHServer(t, root)
	host, port, err := net.SplitHostPort(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ssh-creds"},
		Data: map[string][]byte{"ssh-privatekey": srv.ClientKeyPEM, "known_hosts": srv.KnownHosts}}
	if err := env.Client.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	charts := map[string]string{
		"url": "git::" + srv.URLFor(repo) + "//charts/app?ref=v1.0.0",
		"scp": "git::git@" + host + ":" + port + ":" + repo.Name + "//charts/app?ref=v1.0.0",
	}
	for name, chart := range charts {
		if err := env.Client.Create(ctx, gitOp(ns, name, chart, "ssh-creds")); err != nil {
			t.Fatal(err)
		}
	}
	fleettest.Eventually(t, timeout, func() error {
		for name := range charts {
			if err := deployedFromGit(t, ns, name); err != nil {
				return err
			}
		}
		return nil
	})

	// Without a key the source is refused, saying what is missing.
	if err := env.Client.Create(ctx, gitOp(ns, "nokey", charts["url"], "")); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error {
		c := condition(getOp(t, ns, "nokey"), fleet.ConditionReady)
		if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "no SSH private key is set") {
			return fmt.Errorf("nokey: ready = %+v", c)
		}
		return nil
	})
	noSecretIn(t, ns, []string{"url", "scp", "nokey"}, srv.ClientKeyPEM)
}

// TestHelmOpChartFromGitHubShorthand: a HelmOp chart given as go-getter's
// GitHub shorthand (github.com/<owner>/<repository>//<directory>?ref=<tag>),
// which Rancher Fleet accepts, is read from
// https://github.com/<owner>/<repository>.git (here a local git server
// behind this package's proxy) with the helm Secret's credentials, which
// go to github.com because the chart lives there.
func TestHelmOpChartFromGitHubShorthand(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "shorthand")
	root := t.TempDir()
	chartRepo(t, root, "org/charts")
	gitSrv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{Username: "fleet", Password: "gh-s3cr3t"})
	gh := routeGitHub(t, gitSrv.URL)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gh-creds"},
		Data: map[string][]byte{"username": []byte("fleet"), "password": []byte("gh-s3cr3t"), "cacerts": gh.CAPEM}}
	if err := env.Client.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, gitOp(ns, "short", "github.com/org/charts//charts/app?ref=v1.0.0", "gh-creds")); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error { return deployedFromGit(t, ns, "short") })
	sent := false
	for _, a := range gh.Auths() {
		sent = sent || a == "fleet:gh-s3cr3t"
	}
	if !sent {
		t.Errorf("github.com never received the helm credentials: %q", gh.Auths())
	}
	noSecretIn(t, ns, []string{"short"}, []byte("gh-s3cr3t"))
}
