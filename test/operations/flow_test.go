package operations

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/manager"
	"github.com/fleetgo/fleet/internal/transitions"
)

const (
	wait = 120 * time.Second
	tick = 500 * time.Millisecond
	ws   = "fleet-default"
)

func configMap(name, value string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  value: %q\n", name, value)
}

// hasEvent reports whether an event with reason was recorded about the
// object kind/name in ns.
func hasEvent(ctx context.Context, g Gomega, ns, kind, name, reason string) bool {
	list, err := upstream.Clientset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name && e.Reason == reason {
			return true
		}
	}
	return false
}

// TestMetricsEventsAndLogs runs a GitRepo flow through a registered agent
// and checks what an operator sees: the manager's and the agent's /metrics
// (Fleet families with the right values, controller-runtime's), the series
// of a deleted GitRepo gone, events on transitions (deploy failed and
// recovered, cluster offline and online), and no secret in any log line.
func TestMetricsEventsAndLogs(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	up, down := upstream.Client, downstream.Client

	mgrAddr, err := freeAddr()
	g.Expect(err).NotTo(HaveOccurred())
	mgr, err := manager.New(ctx, upstream.Config, manager.Options{
		MetricsAddr: mgrAddr, ProbeAddr: "0", WebhookAddr: "0",
		AgentCheckinInterval: 3 * time.Second, Workers: 4,
	})
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = mgr.Start(ctx) }()

	// Register an agent with a token.
	g.Expect(up.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ws}})).To(Succeed())
	g.Expect(up.Create(ctx, &fleet.ClusterRegistrationToken{
		ObjectMeta: metav1.ObjectMeta{Name: "ops-token", Namespace: ws},
		Spec:       fleet.ClusterRegistrationTokenSpec{TTL: &metav1.Duration{Duration: time.Hour}},
	})).To(Succeed())
	values := map[string]interface{}{}
	g.Eventually(func(g Gomega) {
		s := &corev1.Secret{}
		g.Expect(up.Get(ctx, client.ObjectKey{Namespace: ws, Name: "ops-token"}, s)).To(Succeed())
		g.Expect(yaml.Unmarshal(s.Data["values"], &values)).To(Succeed())
		g.Expect(values).To(HaveKey("token"))
	}, wait, tick).Should(Succeed())
	str := func(k string) string { s, _ := values[k].(string); return s }
	registrationToken := str("token")
	g.Expect(registrationToken).NotTo(BeEmpty())
	g.Expect(down.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fleet.DefaultSystemNamespace}})).To(Succeed())
	g.Expect(down.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent-bootstrap", Namespace: fleet.DefaultSystemNamespace},
		StringData: map[string]string{
			"apiServerURL": str("apiServerURL"), "apiServerCA": str("apiServerCA"), "token": registrationToken,
			"tokenName": str("tokenName"), "clusterNamespace": str("clusterNamespace"),
			"systemRegistrationNamespace": str("systemRegistrationNamespace"),
		},
	})).To(Succeed())
	g.Expect(down.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: fleet.DefaultSystemNamespace},
		Data:       map[string]string{"config": `{"labels":{"env":"ops"}}`},
	})).To(Succeed())
	agentAddr, err := freeAddr()
	g.Expect(err).NotTo(HaveOccurred())
	agentOpts := agent.Options{Downstream: downstream.Config, CheckinInterval: 3 * time.Second,
		FirstCheckinDelay: time.Second, MetricsAddr: agentAddr}
	agentCtx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan struct{})
	go func() { defer close(agentDone); _ = agent.Run(agentCtx, agentOpts) }()
	var cluster fleet.Cluster
	g.Eventually(func(g Gomega) {
		list := &fleet.ClusterList{}
		g.Expect(up.List(ctx, list, client.InNamespace(ws), client.MatchingLabels{"env": "ops"})).To(Succeed())
		g.Expect(list.Items).To(HaveLen(1))
		cluster = list.Items[0]
		g.Expect(cluster.Status.Namespace).NotTo(BeEmpty())
		g.Expect(cluster.Status.Agent.LastSeen.IsZero()).To(BeFalse())
	}, wait, tick).Should(Succeed())

	g.Expect(up.Create(ctx, &fleet.ClusterGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "ops-group"},
		Spec:       fleet.ClusterGroupSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "ops"}}},
	})).To(Succeed())

	// A GitRepo over HTTP with basic auth.
	const gitPassword = "pw-0f5e1c7a9d3b"
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "ops")
	repo.Commit("master", map[string]string{
		"apps/web/fleet.yaml": "defaultNamespace: web\n",
		"apps/web/cm.yaml":    configMap("web", "v1"),
	})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{Username: "fleet", Password: gitPassword})
	g.Expect(up.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "git-creds"}, Type: corev1.SecretTypeBasicAuth,
		Data: map[string][]byte{"username": []byte("fleet"), "password": []byte(gitPassword)},
	})).To(Succeed())
	gr := &fleet.GitRepo{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "ops"},
		Spec: fleet.GitRepoSpec{
			Repo: srv.URLFor(repo), ClientSecretName: "git-creds", Paths: []string{"apps/*"},
			PollingInterval: &metav1.Duration{Duration: time.Second},
			Targets:         []fleet.GitTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "ops"}}}},
		},
	}
	g.Expect(up.Create(ctx, gr)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cm := &corev1.ConfigMap{}
		g.Expect(down.Get(ctx, client.ObjectKey{Namespace: "web", Name: "web"}, cm)).To(Succeed())
	}, wait, tick).Should(Succeed())

	// The manager's /metrics: every Fleet family, with the flow's values.
	bundleName := "ops-apps-web"
	g.Eventually(func(g Gomega) {
		body, err := scrape(mgrAddr)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(series(body, "fleet_gitrepo_ready_clusters", map[string]string{"name": "ops", "namespace": ws, "paths": "apps/*"})).To(Equal([]float64{1}))
		g.Expect(series(body, "fleet_gitrepo_desired_ready_clusters", map[string]string{"name": "ops"})).To(Equal([]float64{1}))
		g.Expect(series(body, "fleet_gitrepo_resources_ready", map[string]string{"name": "ops"})).To(Equal([]float64{1}))
		g.Expect(series(body, "fleet_bundle_ready", map[string]string{"name": bundleName, "repo": "ops"})).To(Equal([]float64{1}))
		g.Expect(series(body, "fleet_bundle_desired_ready", map[string]string{"name": bundleName})).To(Equal([]float64{1}))
		g.Expect(series(body, "fleet_bundle_state", map[string]string{"name": bundleName, "state": "Ready"})).To(Equal([]float64{1}))
		g.Expect(series(body, "fleet_bundledeployment_state", map[string]string{
			"name": bundleName, "namespace": cluster.Status.Namespace, "cluster_name": cluster.Name,
			"bundle_namespace": ws, "repo": "ops", "state": "Ready"})).To(Equal([]float64{1}))
		g.Expect(series(body, "fleet_cluster_state", map[string]string{"name": cluster.Name, "namespace": ws, "state": "Ready"})).To(Equal([]float64{1}))
		g.Expect(series(body, "fleet_cluster_resources_count_ready", map[string]string{"name": cluster.Name})).To(Equal([]float64{1}))
		g.Expect(series(body, "fleet_cluster_group_cluster_count", map[string]string{"name": "ops-group", "namespace": ws})).To(Equal([]float64{1}))
		g.Expect(series(body, "fleet_cluster_group_bundle_ready", map[string]string{"name": "ops-group"})).To(Equal([]float64{1}))
		ok := series(body, "fleet_gitrepo_fetch_latest_commit_success_total", map[string]string{"name": "ops", "namespace": ws})
		g.Expect(ok).To(HaveLen(1))
		g.Expect(ok[0]).To(BeNumerically(">=", 1))
		g.Expect(series(body, "fleet_gitrepo_fetch_latest_commit_duration_seconds_count", map[string]string{"name": "ops"})).To(HaveLen(1))
		g.Expect(series(body, "controller_runtime_reconcile_total", map[string]string{"controller": "gitrepo", "result": "success"})).NotTo(BeEmpty())
		g.Expect(series(body, "controller_runtime_reconcile_total", map[string]string{"controller": "bundle", "result": "success"})).NotTo(BeEmpty())
	}, wait, tick).Should(Succeed())

	// The agent's /metrics: its own gauge (and controller-runtime's).
	g.Eventually(func(g Gomega) {
		body, err := scrape(agentAddr)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(series(body, "fleet_agent_bundledeployments", map[string]string{"cluster_namespace": cluster.Status.Namespace, "state": "Ready"})).To(Equal([]float64{1}))
		g.Expect(series(body, "controller_runtime_reconcile_total", map[string]string{"controller": "bundledeployment", "result": "success"})).NotTo(BeEmpty())
	}, wait, tick).Should(Succeed())

	// A commit whose resource cannot be applied: DeployFailed once, the
	// failing state in the metrics; fixing it: DeployRecovered.
	repo.Commit("master", map[string]string{
		"apps/web/widget.yaml": "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n",
	})
	g.Eventually(func(g Gomega) {
		g.Expect(hasEvent(ctx, g, ws, "Bundle", bundleName, transitions.ReasonDeployFailed)).To(BeTrue())
		body, err := scrape(mgrAddr)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(series(body, "fleet_bundle_err_applied", map[string]string{"name": bundleName})).To(Equal([]float64{1}))
		g.Expect(series(body, "fleet_bundledeployment_state", map[string]string{"name": bundleName, "state": "ErrApplied"})).To(Equal([]float64{1}))
	}, wait, tick).Should(Succeed())
	repo.RemovePath("apps/web/widget.yaml")
	repo.Commit("master", map[string]string{"apps/web/cm.yaml": configMap("web", "v2")})
	g.Eventually(func(g Gomega) bool {
		return hasEvent(ctx, g, ws, "Bundle", bundleName, transitions.ReasonDeployRecovered)
	}, wait, tick).Should(BeTrue())

	// The agent stops: the cluster goes offline (one event); it comes back:
	// online (one event).
	g.Expect(hasEvent(ctx, g, ws, "Cluster", cluster.Name, transitions.ReasonClusterOffline)).To(BeFalse(),
		"registering (never checked in, then checked in) is no offline transition")
	stopAgent()
	<-agentDone
	g.Eventually(func(g Gomega) bool {
		return hasEvent(ctx, g, ws, "Cluster", cluster.Name, transitions.ReasonClusterOffline)
	}, wait, tick).Should(BeTrue())
	agentCtx, stopAgent = context.WithCancel(ctx)
	agentDone = make(chan struct{})
	go func() { defer close(agentDone); _ = agent.Run(agentCtx, agentOpts) }()
	g.Eventually(func(g Gomega) bool {
		return hasEvent(ctx, g, ws, "Cluster", cluster.Name, transitions.ReasonClusterOnline)
	}, wait, tick).Should(BeTrue())
	list, err := upstream.Clientset.CoreV1().Events(ws).List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	offline := 0
	for _, e := range list.Items {
		if e.Reason == transitions.ReasonClusterOffline && e.InvolvedObject.Name == cluster.Name {
			offline += max(int(e.Count), 1)
		}
	}
	g.Expect(offline).To(Equal(1), "one offline transition, one event")

	// Deleting the GitRepo removes its series (and its Bundle's).
	g.Expect(up.Delete(ctx, gr)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(up.Get(ctx, client.ObjectKeyFromObject(gr), &fleet.GitRepo{}))
	}, wait, tick).Should(BeTrue())
	g.Eventually(func(g Gomega) {
		body, err := scrape(mgrAddr)
		g.Expect(err).NotTo(HaveOccurred())
		for _, name := range []string{"fleet_gitrepo_ready_clusters", "fleet_gitrepo_resources_ready",
			"fleet_gitrepo_fetch_latest_commit_success_total", "fleet_gitrepo_fetch_latest_commit_failure_total",
			"fleet_gitrepo_fetch_latest_commit_duration_seconds_count"} {
			g.Expect(series(body, name, map[string]string{"name": "ops", "namespace": ws})).To(BeEmpty(), name)
		}
		g.Expect(series(body, "fleet_bundle_ready", map[string]string{"name": bundleName})).To(BeEmpty())
		g.Expect(series(body, "fleet_bundledeployment_state", map[string]string{"name": bundleName})).To(BeEmpty())
		// The cluster is still there, so are its series.
		g.Expect(series(body, "fleet_cluster_state", map[string]string{"name": cluster.Name})).To(HaveLen(1))
	}, wait, tick).Should(Succeed())

	// No secret of the flow is in any log line: the registration token,
	// the agent's credential, the git password.
	agentSecret := &corev1.Secret{}
	g.Expect(down.Get(ctx, client.ObjectKey{Namespace: fleet.DefaultSystemNamespace, Name: "fleet-agent"}, agentSecret)).To(Succeed())
	kc, err := clientcmd.Load(agentSecret.Data["kubeconfig"])
	g.Expect(err).NotTo(HaveOccurred())
	var credential string
	for _, a := range kc.AuthInfos {
		credential = a.Token
	}
	g.Expect(credential).NotTo(BeEmpty())
	stopAgent()
	<-agentDone
	cancel()
	captured := logs.String()
	g.Expect(len(captured)).To(BeNumerically(">", 10000), "the flow was logged")
	for name, secret := range map[string]string{"registration token": registrationToken, "agent credential": credential, "git password": gitPassword} {
		if strings.Contains(captured, secret) {
			t.Errorf("the %s appears in the logs", name)
		}
		// Also its tail (a JWT's signature): a truncated secret still leaks.
		if len(secret) > 32 && strings.Contains(captured, secret[len(secret)-32:]) {
			t.Errorf("part of the %s appears in the logs", name)
		}
	}
	// Logs are structured: reconciler lines carry the object key.
	g.Expect(captured).To(ContainSubstring(`"GitRepo":{"name":"ops","namespace":"fleet-default"}`))
}
