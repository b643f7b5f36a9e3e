// Package e2e runs a GitRepo end to end on real parts: an in-process git
// server, the whole manager on one API server, and a registered agent that
// deploys to a separate downstream API server.
package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/contentapi/serve"
	"github.com/fleetgo/fleet/internal/controller/bundle"
	"github.com/fleetgo/fleet/internal/controller/content"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/manager"
	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

var upstream, downstream *testenv.Cluster

func TestMain(m *testing.M) {
	if os.Getenv("E2E_LOG") != "" {
		ctrl.SetLogger(zap.New(zap.UseDevMode(true)))
	}
	var err error
	if upstream, downstream, err = testenv.StartPair("gitops"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = downstream.Stop()
	_ = upstream.Stop()
	os.Exit(code)
}

func configMap(name, value string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  value: %q\n", name, value)
}

// registerAgent creates a token, installs its values downstream and runs
// an agent labelled env=dev; it returns the registered Cluster.
func registerAgent(ctx context.Context, g *WithT, ws string) fleet.Cluster {
	cluster, _, err := fleettest.RegisterAgent(ctx, upstream, downstream, fleettest.Bootstrap{
		Workspace: ws, TokenName: "gitops-token", Labels: map[string]string{"env": "dev"},
	})
	g.Expect(err).NotTo(HaveOccurred())
	return cluster
}

// TestGitRepoToDownstream: a GitRepo over HTTP with basic auth deploys to
// the downstream cluster; a push updates the object there; a removed path
// removes its objects; a broken commit leaves the deployment running and
// shows the error; deleting the GitRepo removes the deployment.
func TestGitRepoToDownstream(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	up, down := upstream.Client, downstream.Client
	const ws = "fleet-default"
	const wait, poll = 120 * time.Second, 500 * time.Millisecond

	mgr, err := manager.New(ctx, upstream.Config, manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", WebhookAddr: "0",
		AgentCheckinInterval: 5 * time.Second, Workers: 4,
		// The bootstrap also creates the system namespaces registration uses.
		BootstrapNamespace: "fleet-local",
		// This test runs the manager without the content API, so that the
		// older way stays covered end to end: per-cluster Content
		// ClusterRoles granted before each deployment, and an agent that
		// finds no content API and reads Contents directly
		// (test/e2e covers the content API).
		ContentAPI: serve.Options{Addr: "0"},
	})
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = mgr.Start(ctx) }()
	g.Expect(up.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ws}})).To(Succeed())
	cluster := registerAgent(ctx, g, ws)

	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "fleet-examples")
	repo.Commit("master", map[string]string{
		"apps/web/fleet.yaml": "defaultNamespace: web\n",
		"apps/web/cm.yaml":    configMap("web", "v1"),
		"apps/db/fleet.yaml":  "defaultNamespace: db\n",
		"apps/db/cm.yaml":     configMap("db", "v1"),
	})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{Username: "fleet", Password: "s3cret"})
	g.Expect(up.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "git-creds"}, Type: corev1.SecretTypeBasicAuth,
		Data: map[string][]byte{"username": []byte("fleet"), "password": []byte("s3cret")},
	})).To(Succeed())
	gr := &fleet.GitRepo{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "examples"},
		Spec: fleet.GitRepoSpec{
			Repo: srv.URLFor(repo), ClientSecretName: "git-creds", Paths: []string{"apps/*"},
			PollingInterval: &metav1.Duration{Duration: time.Second},
			Targets:         []fleet.GitTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}}},
		},
	}
	g.Expect(up.Create(ctx, gr)).To(Succeed())

	value := func(ns, name string) func(g Gomega) string {
		return func(g Gomega) string {
			cm := &corev1.ConfigMap{}
			g.Expect(down.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm)).To(Succeed())
			return cm.Data["value"]
		}
	}
	g.Eventually(value("web", "web"), wait, poll).Should(Equal("v1"))
	g.Eventually(value("db", "db"), wait, poll).Should(Equal("v1"))
	g.Eventually(func(g Gomega) {
		r := &fleet.GitRepo{}
		g.Expect(up.Get(ctx, client.ObjectKeyFromObject(gr), r)).To(Succeed())
		g.Expect(r.Status.Display.ReadyBundleDeployments).To(Equal("2/2"))
		g.Expect(meta.IsStatusConditionTrue(r.Status.Conditions, fleet.ConditionReady)).To(BeTrue())
		// The cluster counts the GitRepo as ready on it.
		c := &fleet.Cluster{}
		g.Expect(up.Get(ctx, client.ObjectKeyFromObject(&cluster), c)).To(Succeed())
		g.Expect(c.Status.DesiredReadyGitRepos).To(Equal(1))
		g.Expect(c.Status.ReadyGitRepos).To(Equal(1))
	}, wait, poll).Should(Succeed())

	// Without the content API the agent is bound to its Content role,
	// which lists exactly the Contents of its deployments.
	g.Eventually(func(g Gomega) {
		role := &rbacv1.ClusterRole{}
		g.Expect(up.Get(ctx, client.ObjectKey{Name: content.RoleName(cluster.Status.Namespace)}, role)).To(Succeed())
		bds := &fleet.BundleDeploymentList{}
		g.Expect(up.List(ctx, bds, client.InNamespace(cluster.Status.Namespace))).To(Succeed())
		var want []string
		for i := range bds.Items {
			want = append(want, bundle.ContentsOf(&bds.Items[i])...)
		}
		g.Expect(bundle.GrantedContents(role)).To(ConsistOf(want))
	}, wait, poll).Should(Succeed())
	g.Expect(apierrors.IsNotFound(up.Get(ctx, client.ObjectKey{Name: contentapi.APIServiceName}, apiService()))).To(BeTrue(), "no APIService without the content API")

	// A push updates the deployed object.
	repo.Commit("master", map[string]string{"apps/web/cm.yaml": configMap("web", "v2")})
	g.Eventually(value("web", "web"), wait, poll).Should(Equal("v2"))

	// Removing a path removes its bundle and its objects downstream.
	repo.RemovePath("apps/db")
	repo.Commit("master", nil)
	g.Eventually(func() bool {
		return apierrors.IsNotFound(down.Get(ctx, client.ObjectKey{Namespace: "db", Name: "db"}, &corev1.ConfigMap{}))
	}, wait, poll).Should(BeTrue())

	// A broken commit leaves the deployment running and shows the error.
	broken := repo.Commit("master", map[string]string{
		"apps/web/fleet.yaml": "defaultNamespace: [oops\n", "apps/web/cm.yaml": configMap("web", "v3"),
	})
	g.Eventually(func(g Gomega) {
		r := &fleet.GitRepo{}
		g.Expect(up.Get(ctx, client.ObjectKeyFromObject(gr), r)).To(Succeed())
		g.Expect(r.Status.PollingCommit).To(Equal(broken))
		c := meta.FindStatusCondition(r.Status.Conditions, fleet.ConditionReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Message).To(ContainSubstring("fleet.yaml"))
	}, wait, poll).Should(Succeed())
	g.Consistently(value("web", "web"), 5*time.Second, time.Second).Should(Equal("v2"))

	// Deleting the GitRepo removes its deployment downstream.
	g.Expect(up.Delete(ctx, gr)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(down.Get(ctx, client.ObjectKey{Namespace: "web", Name: "web"}, &corev1.ConfigMap{}))
	}, wait, poll).Should(BeTrue())
}

func apiService() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apiregistration.k8s.io/v1")
	u.SetKind("APIService")
	return u
}
