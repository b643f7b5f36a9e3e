package faults

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/manager"
	"github.com/fleetgo/fleet/internal/testenv"
)

// Fault 7: the agent's credential is revoked (its Cluster is deleted). The
// credential gets 401, the agent keeps running without acting (no crash,
// no writes), and a fresh token re-registers it; bundles deploy again.
func TestCredentialRevoked(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	const ws, agentNS, clientID, appNS = "faults-revoke", "faults-revoke-agent", "revoke-1", "revoke-app"
	match := map[string]string{"fault": "revoke"}
	startManager(t, manager.Options{AgentCheckinInterval: 2 * time.Second})
	v := newWorkspace(t, ws, "revoke-token")
	installBootstrap(t, downstream, agentNS, clientID, v, match)
	_, agentDone := startAgent(t, downstream.Config, agentNS, agent.Options{})
	cluster := waitCheckedIn(t, ws, match, 1)[0]

	putBundle(t, ws, "revoke-app", "v1", match, appNS)
	waitConfigMap(t, downstream, appNS, "revoke-app", "v1")

	// The credential the agent stores downstream.
	s := &corev1.Secret{}
	g.Expect(downstream.Client.Get(ctx, client.ObjectKey{Namespace: agentNS, Name: register.AgentSecretName}, s)).To(Succeed())
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data["kubeconfig"])
	g.Expect(err).NotTo(HaveOccurred())
	agentClient, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(agentClient.List(ctx, &fleet.BundleDeploymentList{}, client.InNamespace(cluster.Status.Namespace))).To(Succeed())

	// Revoke: delete the Cluster.
	revoked := time.Now()
	g.Expect(upstream.Client.Delete(ctx, &cluster)).To(Succeed())
	g.Eventually(func() bool {
		err := agentClient.List(ctx, &fleet.BundleDeploymentList{}, client.InNamespace(cluster.Status.Namespace))
		return apierrors.IsUnauthorized(err)
	}, wait, tick).Should(BeTrue(), "the deleted cluster's credential must get 401")
	t.Logf("RECOVERY credential-revoked: Cluster deleted -> agent credential refused (401) in %s", since(revoked))
	g.Eventually(func() bool {
		return apierrors.IsNotFound(upstream.Client.Get(ctx, client.ObjectKeyFromObject(&cluster), &fleet.Cluster{}))
	}, wait, tick).Should(BeTrue())

	// The agent stays up and does not act: no Cluster reappears on its own
	// (it has no token to register with) and the process does not exit.
	g.Consistently(func(g Gomega) []fleet.Cluster { return clusters(g, ws, match) }, 5*time.Second, tick).Should(BeEmpty())
	g.Expect(agentDone).NotTo(Receive(), "the agent must keep running after a 401")
	cm := &corev1.ConfigMap{}
	err = downstream.Client.Get(ctx, client.ObjectKey{Namespace: appNS, Name: "revoke-app"}, cm)
	t.Logf("after revocation the downstream ConfigMap: present=%v (deleting a Cluster deletes its BundleDeployments)", err == nil)

	// The test control plane has no kube-controller-manager: finish the
	// namespace deletion as its namespace controller would, so that the
	// same clientID can get the same Cluster name and namespace back.
	finishNamespaceDeletion(t, cluster.Status.Namespace)

	// A fresh token re-registers the same clientID; bundles deploy again.
	v2 := newToken(t, ws, "revoke-token-2")
	renewed := time.Now()
	installBootstrap(t, downstream, agentNS, clientID, v2, match)
	again := waitCheckedIn(t, ws, match, 1)[0]
	g.Expect(again.Spec.ClientID).To(Equal(clientID))
	t.Logf("RECOVERY credential-revoked: new bootstrap secret -> cluster registered and checked in again in %s", since(renewed))
	putBundle(t, ws, "revoke-app", "v2", match, appNS)
	waitConfigMap(t, downstream, appNS, "revoke-app", "v2")
	t.Logf("RECOVERY credential-revoked: new bootstrap secret -> changed bundle deployed in %s", since(renewed))
	g.Expect(agentDone).NotTo(Receive())
}

func waitConfigMap(t *testing.T, d *testenv.Cluster, ns, name, value string) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		cm := &corev1.ConfigMap{}
		g.Expect(d.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, cm)).To(Succeed())
		g.Expect(cm.Data["value"]).To(Equal(value))
	}, wait, tick).Should(Succeed())
}

// finishNamespaceDeletion does what kube-controller-manager's namespace
// controller does for a terminating namespace (envtest runs none): delete
// its content and drop the kubernetes finalizer.
func finishNamespaceDeletion(t *testing.T, ns string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	c := upstream.Client
	g.Eventually(func(g Gomega) {
		n := &corev1.Namespace{}
		err := c.Get(ctx, client.ObjectKey{Name: ns}, n)
		if apierrors.IsNotFound(err) {
			return
		}
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n.DeletionTimestamp).NotTo(BeNil(), "namespace %s is not being deleted", ns)
		bds := &fleet.BundleDeploymentList{}
		g.Expect(c.List(ctx, bds, client.InNamespace(ns))).To(Succeed())
		for i := range bds.Items {
			bd := &bds.Items[i]
			if len(bd.Finalizers) > 0 {
				bd.Finalizers = nil
				g.Expect(client.IgnoreNotFound(c.Update(ctx, bd))).To(Succeed())
			}
		}
		for _, obj := range []client.Object{&fleet.BundleDeployment{}, &corev1.Secret{}, &corev1.ConfigMap{},
			&corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}} {
			g.Expect(client.IgnoreNotFound(c.DeleteAllOf(ctx, obj, client.InNamespace(ns)))).To(Succeed())
		}
		n.Spec.Finalizers = nil
		_, err = upstream.Clientset.CoreV1().Namespaces().Finalize(ctx, n, metav1.UpdateOptions{})
		g.Expect(client.IgnoreNotFound(err)).To(Succeed())
		g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}))).To(BeTrue())
	}, wait, time.Second).Should(Succeed())
}
