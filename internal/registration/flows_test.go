package registration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/registration"
	"github.com/fleetgo/fleet/internal/testenv"
)

// createNodes adds nodes to a downstream cluster (envtest has no kubelets):
// ready ones and not-ready ones.
func createNodes(t *testing.T, c client.Client, ready, notReady []string) {
	t.Helper()
	ctx := context.Background()
	mk := func(name string, status corev1.ConditionStatus) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := c.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}
		if err := c.Status().Update(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range ready {
		mk(n, corev1.ConditionTrue)
	}
	for _, n := range notReady {
		mk(n, corev1.ConditionFalse)
	}
}

// waitRegistered waits until the agent in ns of d stored its credential and
// the Cluster of clientID in workspace has checked in; it returns the Cluster.
func waitRegistered(t *testing.T, clientID, ws string) *fleet.Cluster {
	t.Helper()
	var got *fleet.Cluster
	eventually(t, "cluster registered and checked in", func() error {
		cs := clustersByClientID(t, clientID)
		if len(cs) != 1 {
			return fmt.Errorf("want 1 cluster with clientID, got %d", len(cs))
		}
		c := cs[0]
		if c.Namespace != ws || c.Status.Namespace == "" || c.Status.Agent.LastSeen.IsZero() {
			return fmt.Errorf("cluster %s/%s not checked in: namespace=%q lastSeen=%v", c.Namespace, c.Name, c.Status.Namespace, c.Status.Agent.LastSeen)
		}
		got = &c
		return nil
	})
	return got
}

// TestAgentInitiated is seed 004's "new cluster" walkthrough, then the
// re-registration of the same cluster, on separate API servers.
func TestAgentInitiated(t *testing.T) {
	ctx := context.Background()
	d := down[0]
	const agentNS = "cattle-fleet-system"
	clientID := kubeSystemUID(t, d)
	createNodes(t, d.Client, []string{"node-b", "node-a"}, []string{"node-c"})

	values := newToken(t, workspace, "new-token", 240*time.Hour)
	tok := &fleet.ClusterRegistrationToken{}
	if err := up.Client.Get(ctx, client.ObjectKey{Namespace: workspace, Name: "new-token"}, tok); err != nil {
		t.Fatal(err)
	}
	if tok.Status.SecretName != "new-token" || tok.Status.Expires == nil ||
		!tok.Status.Expires.Time.Equal(tok.CreationTimestamp.Add(240*time.Hour)) {
		t.Errorf("token status = %+v, want secretName new-token and expires = creation + 240h", tok.Status)
	}
	if values.ClusterNamespace != workspace || values.APIServerURL != up.Config.Host || values.Token == "" ||
		values.TokenName != "new-token" || values.SystemRegistrationNamespace != fleet.DefaultSystemRegistrationNamespace || values.APIServerCA == "" {
		t.Errorf("values.yaml incomplete: url=%q ns=%q tokenName=%q sysns=%q", values.APIServerURL, values.ClusterNamespace, values.TokenName, values.SystemRegistrationNamespace)
	}

	installBootstrap(t, d, agentNS, values, register.AgentConfig{Labels: map[string]string{"env": "dev", "example": "true", "fleet.cattle.io/evil": "x"}})
	stop := startAgent(t, d, agentNS)
	cluster := waitRegistered(t, clientID, workspace)

	t.Run("new cluster with the registration labels", func(t *testing.T) {
		if cluster.Name != names.ClusterNameForClientID(clientID) {
			t.Errorf("cluster name %s, want %s", cluster.Name, names.ClusterNameForClientID(clientID))
		}
		if cluster.Labels["env"] != "dev" || cluster.Labels["example"] != "true" {
			t.Errorf("labels %v, want env=dev example=true", cluster.Labels)
		}
		if _, ok := cluster.Labels["fleet.cattle.io/evil"]; ok {
			t.Errorf("reserved label was taken from the registration: %v", cluster.Labels)
		}
		if want := names.ClusterNamespace(workspace, cluster.Name); cluster.Status.Namespace != want {
			t.Errorf("status.namespace %q, want %q", cluster.Status.Namespace, want)
		}
		ns := &corev1.Namespace{}
		if err := up.Client.Get(ctx, client.ObjectKey{Name: cluster.Status.Namespace}, ns); err != nil {
			t.Errorf("cluster namespace: %v", err)
		} else if ns.Labels[fleet.ManagedLabel] != "true" || ns.Annotations[fleet.ClusterLabel] != cluster.Name {
			t.Errorf("cluster namespace labels %v annotations %v", ns.Labels, ns.Annotations)
		}
	})
	t.Run("node counts and sample node", func(t *testing.T) {
		eventually(t, "nodes reported", func() error {
			c := &fleet.Cluster{}
			if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c); err != nil {
				return err
			}
			if c.Status.Display.ReadyNodes != "2/3" || c.Status.Display.SampleNode != "node-a" ||
				c.Status.Agent.Namespace != agentNS || c.Status.Agent.ReadyNodes != 2 || c.Status.Agent.NonReadyNodes != 1 {
				return fmt.Errorf("display %+v agent %+v", c.Status.Display, c.Status.Agent)
			}
			return nil
		})
	})
	t.Run("bootstrap forgotten, own credential stored, hand-over secret removed", func(t *testing.T) {
		err := d.Client.Get(ctx, client.ObjectKey{Namespace: agentNS, Name: register.BootstrapSecretName}, &corev1.Secret{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("bootstrap secret still there: %v", err)
		}
		_, data := agentConfig(t, d, agentNS)
		if string(data[register.KeyClusterName]) != cluster.Name || string(data[register.KeyClusterNamespace]) != workspace ||
			string(data[register.KeyDeploymentNamespace]) != cluster.Status.Namespace {
			t.Errorf("fleet-agent secret keys: clusterName=%s clusterNamespace=%s deploymentNamespace=%s",
				data[register.KeyClusterName], data[register.KeyClusterNamespace], data[register.KeyDeploymentNamespace])
		}
		eventually(t, "registration secret removed after check-in", func() error {
			var list corev1.SecretList
			if err := up.Client.List(ctx, &list, client.InNamespace(fleet.DefaultSystemRegistrationNamespace),
				client.MatchingLabels{fleet.ClusterLabel: cluster.Name}); err != nil {
				return err
			}
			if len(list.Items) != 0 {
				return fmt.Errorf("%d registration secrets left", len(list.Items))
			}
			return nil
		})
		eventually(t, "read grant of the hand-over secret removed, registration delivered", func() error {
			var roles rbacv1.RoleList
			if err := up.Client.List(ctx, &roles, client.InNamespace(fleet.DefaultSystemRegistrationNamespace),
				client.MatchingLabels{fleet.ClusterLabel: cluster.Name}); err != nil {
				return err
			}
			var bindings rbacv1.RoleBindingList
			if err := up.Client.List(ctx, &bindings, client.InNamespace(fleet.DefaultSystemRegistrationNamespace),
				client.MatchingLabels{fleet.ClusterLabel: cluster.Name}); err != nil {
				return err
			}
			if len(roles.Items)+len(bindings.Items) != 0 {
				return fmt.Errorf("%d roles and %d bindings left", len(roles.Items), len(bindings.Items))
			}
			regs := registrationsOf(t, clientID)
			if len(regs) != 1 {
				return fmt.Errorf("%d registrations", len(regs))
			}
			if c := meta.FindStatusCondition(regs[0].Status.Conditions, registration.ConditionGranted); c == nil || c.Reason != registration.ReasonDelivered {
				return fmt.Errorf("condition %+v, want reason Delivered", c)
			}
			return nil
		})
	})

	t.Run("import token can only register", func(t *testing.T) {
		c := clientFor(t, tokenConfig(values))
		wantForbidden(t, "list clusters", c.List(ctx, &fleet.ClusterList{}, client.InNamespace(workspace)))
		wantForbidden(t, "list secrets", c.List(ctx, &corev1.SecretList{}, client.InNamespace(workspace)))
		wantForbidden(t, "get values secret", c.Get(ctx, client.ObjectKey{Namespace: workspace, Name: "new-token"}, &corev1.Secret{}))
		wantForbidden(t, "list registration secrets", c.List(ctx, &corev1.SecretList{}, client.InNamespace(fleet.DefaultSystemRegistrationNamespace)))
		wantForbidden(t, "list registrations", c.List(ctx, &fleet.ClusterRegistrationList{}, client.InNamespace(workspace)))
		wantForbidden(t, "list bundledeployments", c.List(ctx, &fleet.BundleDeploymentList{}, client.InNamespace(cluster.Status.Namespace)))
		other := &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{GenerateName: "request-", Namespace: "ws-a"},
			Spec: fleet.ClusterRegistrationSpec{ClientID: "x", ClientRandom: "y"}}
		wantForbidden(t, "register in another workspace", c.Create(ctx, other, client.DryRunAll))
		own := &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{GenerateName: "request-", Namespace: workspace},
			Spec: fleet.ClusterRegistrationSpec{ClientID: "x", ClientRandom: "y"}}
		if err := c.Create(ctx, own, client.DryRunAll); err != nil {
			t.Errorf("the import token must be able to register in its workspace: %v", err)
		}
	})

	firstCfg, _ := agentConfig(t, d, agentNS)

	t.Run("restart reuses the stored credential", func(t *testing.T) {
		stop()
		before := registrationsOf(t, clientID)
		c := &fleet.Cluster{}
		_ = up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c)
		seen := c.Status.Agent.LastSeen
		stop = startAgent(t, d, agentNS, func(o *agent.Options) {
			o.LeaderElection, o.Identity = true, "agent-a"
			o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 4*time.Second, 3*time.Second, time.Second
		})
		eventually(t, "check-in after restart", func() error {
			if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c); err != nil {
				return err
			}
			if !c.Status.Agent.LastSeen.After(seen.Time) {
				return fmt.Errorf("lastSeen %v not after %v", c.Status.Agent.LastSeen, seen)
			}
			return nil
		})
		lease := &coordinationv1.Lease{}
		if err := d.Client.Get(ctx, client.ObjectKey{Namespace: agentNS, Name: "fleet-agent"}, lease); err != nil {
			t.Errorf("agent lease: %v", err)
		} else if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "agent-a" {
			t.Errorf("lease holder %v, want agent-a", lease.Spec.HolderIdentity)
		}
		if after := registrationsOf(t, clientID); len(after) != len(before) {
			t.Errorf("restart registered again: %d registrations before, %d after", len(before), len(after))
		}
	})

	t.Run("re-registration lands on the same cluster", func(t *testing.T) {
		stop()
		if err := d.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: agentNS, Name: register.AgentSecretName}}); err != nil {
			t.Fatal(err)
		}
		v2 := newToken(t, workspace, "token-2", 0)
		installBootstrap(t, d, agentNS, v2, register.AgentConfig{Labels: map[string]string{"env": "changed"}})
		startAgent(t, d, agentNS)
		eventually(t, "re-registered", func() error {
			err := d.Client.Get(ctx, client.ObjectKey{Namespace: agentNS, Name: register.BootstrapSecretName}, &corev1.Secret{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("bootstrap secret not consumed yet: %v", err)
			}
			regs := registrationsOf(t, clientID)
			if len(regs) != 1 || regs[0].Labels[fleet.RegistrationTokenLabel] != "token-2" || !regs[0].Status.Granted {
				return fmt.Errorf("want exactly the new granted registration, got %d", len(regs))
			}
			return nil
		})
		again := waitRegistered(t, clientID, workspace)
		if again.Name != cluster.Name || again.UID != cluster.UID {
			t.Errorf("re-registration made cluster %s, want the same cluster %s", again.Name, cluster.Name)
		}
		if again.Labels["env"] != "dev" {
			t.Errorf("labels changed by re-registration: %v", again.Labels)
		}
		// The old credential was revoked with the old registration.
		eventually(t, "old credential revoked", func() error {
			err := clientFor(t, firstCfg).List(ctx, &fleet.BundleDeploymentList{}, client.InNamespace(cluster.Status.Namespace))
			if !apierrors.IsUnauthorized(err) {
				return fmt.Errorf("old credential: want 401, got %v", err)
			}
			return nil
		})
	})
}

func registrationsOf(t *testing.T, clientID string) []fleet.ClusterRegistration {
	t.Helper()
	var list fleet.ClusterRegistrationList
	if err := up.Client.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	var out []fleet.ClusterRegistration
	for _, r := range list.Items {
		if r.Spec.ClientID == clientID && r.DeletionTimestamp.IsZero() {
			out = append(out, r)
		}
	}
	return out
}

// TestPredefinedClusterAndSecurity: a Cluster created by the admin with
// spec.clientID is taken by the agent that presents that clientID; then the
// agent's credential is checked against everything it must not do, with a
// second registered cluster as the neighbour; finally the Cluster is
// deleted, its credential gets 401 and the agent registers again once a new
// bootstrap secret is applied.
func TestPredefinedClusterAndSecurity(t *testing.T) {
	ctx := context.Background()
	d := down[1]
	const agentNS = "predefined-agent"
	mine := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "my-cluster", Namespace: workspace}, Spec: fleet.ClusterSpec{ClientID: "really-random"}}
	if err := up.Client.Create(ctx, mine); err != nil {
		t.Fatal(err)
	}
	values := newToken(t, workspace, "predefined-token", time.Hour)
	installBootstrap(t, d, agentNS, values, register.AgentConfig{ClientID: "really-random", Labels: map[string]string{"ignored": "yes"}})
	startAgent(t, d, agentNS)
	got := waitRegistered(t, "really-random", workspace)
	if got.Name != "my-cluster" {
		t.Fatalf("agent registered to %s, want my-cluster", got.Name)
	}
	if _, ok := got.Labels["ignored"]; ok {
		t.Errorf("registration labels applied to a predefined cluster: %v", got.Labels)
	}
	cfg, _ := agentConfig(t, d, agentNS)
	agentClient := clientFor(t, cfg)

	// A neighbour: a second cluster registered by the agent of down[0]
	// (TestAgentInitiated) or, when run alone, a Cluster with a namespace.
	neighbour := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "neighbour", Namespace: workspace}, Spec: fleet.ClusterSpec{ClientID: "neighbour-id"}}
	if err := up.Client.Create(ctx, neighbour); err != nil {
		t.Fatal(err)
	}
	eventually(t, "neighbour namespace", func() error {
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(neighbour), neighbour); err != nil {
			return err
		}
		if neighbour.Status.Namespace == "" {
			return fmt.Errorf("no namespace yet")
		}
		return nil
	})
	otherNS := neighbour.Status.Namespace
	ownNS := got.Status.Namespace
	bd := &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: "secret-app", Namespace: otherNS}}
	if err := up.Client.Create(ctx, bd); err != nil {
		t.Fatal(err)
	}
	if err := up.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "secret-app", Namespace: otherNS}}); err != nil {
		t.Fatal(err)
	}

	t.Run("allowed: own bundledeployments, own cluster status", func(t *testing.T) {
		if err := agentClient.List(ctx, &fleet.BundleDeploymentList{}, client.InNamespace(ownNS)); err != nil {
			t.Errorf("list own bundledeployments: %v", err)
		}
		patch := client.RawPatch(types.MergePatchType, []byte(`{"status":{"agent":{"namespace":"`+agentNS+`"}}}`))
		if err := agentClient.Status().Patch(ctx, &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: got.Name, Namespace: workspace}}, patch); err != nil {
			t.Errorf("patch own cluster status: %v", err)
		}
	})
	t.Run("refused: other cluster's namespace", func(t *testing.T) {
		wantForbidden(t, "list other bundledeployments", agentClient.List(ctx, &fleet.BundleDeploymentList{}, client.InNamespace(otherNS)))
		wantForbidden(t, "get other bundledeployment", agentClient.Get(ctx, client.ObjectKeyFromObject(bd), &fleet.BundleDeployment{}))
		wantForbidden(t, "list other secrets", agentClient.List(ctx, &corev1.SecretList{}, client.InNamespace(otherNS)))
		wantForbidden(t, "get other secret", agentClient.Get(ctx, client.ObjectKey{Namespace: otherNS, Name: "secret-app"}, &corev1.Secret{}))
		wantForbidden(t, "list all bundledeployments", agentClient.List(ctx, &fleet.BundleDeploymentList{}))
		wantForbidden(t, "list contents", agentClient.List(ctx, &fleet.ContentList{}))
	})
	t.Run("refused: own cluster's labels and spec, other cluster's status", func(t *testing.T) {
		key := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: got.Name, Namespace: workspace}}
		wantForbidden(t, "patch own labels", agentClient.Patch(ctx, key, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"env":"prod"}}}`))))
		wantForbidden(t, "patch own spec", agentClient.Patch(ctx, key, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"paused":true}}`))))
		wantForbidden(t, "get own cluster", agentClient.Get(ctx, client.ObjectKeyFromObject(key), &fleet.Cluster{}))
		wantForbidden(t, "list clusters", agentClient.List(ctx, &fleet.ClusterList{}, client.InNamespace(workspace)))
		wantForbidden(t, "patch other cluster status", agentClient.Status().Patch(ctx,
			&fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: neighbour.Name, Namespace: workspace}},
			client.RawPatch(types.MergePatchType, []byte(`{"status":{"agent":{"namespace":"x"}}}`))))
	})
	t.Run("refused: registration secrets and other workspaces", func(t *testing.T) {
		wantForbidden(t, "list registration secrets", agentClient.List(ctx, &corev1.SecretList{}, client.InNamespace(fleet.DefaultSystemRegistrationNamespace)))
		wantForbidden(t, "get a registration secret", agentClient.Get(ctx, client.ObjectKey{Namespace: fleet.DefaultSystemRegistrationNamespace,
			Name: names.RegistrationSecretName("neighbour-id", "r")}, &corev1.Secret{}))
		wantForbidden(t, "list secrets of the workspace", agentClient.List(ctx, &corev1.SecretList{}, client.InNamespace(workspace)))
		wantForbidden(t, "create registration", agentClient.Create(ctx, &fleet.ClusterRegistration{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "x-", Namespace: workspace}}, client.DryRunAll))
	})

	t.Run("deleted cluster: credential 401, agent registers again with a new token", func(t *testing.T) {
		if err := up.Client.Delete(ctx, got); err != nil {
			t.Fatal(err)
		}
		eventually(t, "credential revoked", func() error {
			err := agentClient.List(ctx, &fleet.BundleDeploymentList{}, client.InNamespace(ownNS))
			if !apierrors.IsUnauthorized(err) {
				return fmt.Errorf("want 401, got %v", err)
			}
			return nil
		})
		wantUnauthorized(t, "deleted cluster's credential", agentClient.List(ctx, &fleet.BundleDeploymentList{}, client.InNamespace(ownNS)))
		v2 := newToken(t, workspace, "predefined-token-2", time.Hour)
		installBootstrap(t, d, agentNS, v2, register.AgentConfig{ClientID: "really-random"})
		again := waitRegistered(t, "really-random", workspace)
		if again.Name != names.ClusterNameForClientID("really-random") {
			t.Errorf("re-registered to %s, want a new cluster %s", again.Name, names.ClusterNameForClientID("really-random"))
		}
	})
}

// TestRefusals: an expired token cannot register; a clientID owned by
// another workspace and an unknown token are refused with a condition; a
// garbled bootstrap secret is reported and kept.
func TestRefusals(t *testing.T) {
	ctx := context.Background()
	t.Run("expired token", func(t *testing.T) {
		v := newToken(t, workspace, "short", 3*time.Second)
		eventually(t, "expired token deleted", func() error {
			err := up.Client.Get(ctx, client.ObjectKey{Namespace: workspace, Name: "short"}, &fleet.ClusterRegistrationToken{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("token still exists: %v", err)
			}
			return nil
		})
		c := clientFor(t, tokenConfig(v))
		reg := &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{GenerateName: "request-", Namespace: workspace,
			Labels: map[string]string{fleet.RegistrationTokenLabel: "short"}}, Spec: fleet.ClusterRegistrationSpec{ClientID: "late", ClientRandom: "r"}}
		wantUnauthorized(t, "register with an expired token", c.Create(ctx, reg))

		// The agent with that token: clear event, nothing deleted, no crash.
		const ns = "expired-agent"
		installBootstrap(t, down[1], ns, v, register.AgentConfig{ClientID: "late"})
		startAgent(t, down[1], ns)
		waitEvent(t, down[1], ns, "RegistrationFailed", "refused")
		if err := down[1].Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: register.BootstrapSecretName}, &corev1.Secret{}); err != nil {
			t.Errorf("bootstrap secret must be kept: %v", err)
		}
		if len(clustersByClientID(t, "late")) != 0 {
			t.Errorf("a cluster was created with an expired token")
		}
	})
	t.Run("clientID of another workspace", func(t *testing.T) {
		if err := up.Client.Create(ctx, &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ws-a"}, Spec: fleet.ClusterSpec{ClientID: "shared-id"}}); err != nil {
			t.Fatal(err)
		}
		v := newToken(t, workspace, "cross-token", time.Hour)
		reg := &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{GenerateName: "request-", Namespace: workspace,
			Labels: map[string]string{fleet.RegistrationTokenLabel: "cross-token"}}, Spec: fleet.ClusterRegistrationSpec{ClientID: "shared-id", ClientRandom: "r"}}
		if err := clientFor(t, tokenConfig(v)).Create(ctx, reg); err != nil {
			t.Fatal(err)
		}
		waitRefused(t, reg, registration.ReasonOtherWorkspace)
		if cs := clustersByClientID(t, "shared-id"); len(cs) != 1 || cs[0].Namespace != "ws-a" {
			t.Errorf("clusters with the clientID: %d", len(cs))
		}
	})
	t.Run("unknown token name", func(t *testing.T) {
		reg := &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{GenerateName: "request-", Namespace: workspace,
			Labels: map[string]string{fleet.RegistrationTokenLabel: "no-such-token"}}, Spec: fleet.ClusterRegistrationSpec{ClientID: "nobody", ClientRandom: "r"}}
		if err := up.Client.Create(ctx, reg); err != nil {
			t.Fatal(err)
		}
		waitRefused(t, reg, registration.ReasonUnknownToken)
	})
	t.Run("missing, then garbled bootstrap secret", func(t *testing.T) {
		const ns = "garbled-agent"
		_ = down[0].Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		startAgent(t, down[0], ns)
		waitEvent(t, down[0], ns, "RegistrationFailed", "no fleet-agent-bootstrap secret")
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: register.BootstrapSecretName, Namespace: ns}, Data: map[string][]byte{"token": []byte("garbage")}}
		if err := down[0].Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		waitEvent(t, down[0], ns, "RegistrationFailed", "missing keys")
		if err := down[0].Client.Get(ctx, client.ObjectKeyFromObject(s), &corev1.Secret{}); err != nil {
			t.Errorf("garbled bootstrap secret must be kept: %v", err)
		}
	})
	t.Run("wrong CA", func(t *testing.T) {
		const ns = "wrong-ca-agent"
		v := newToken(t, workspace, "ca-token", time.Hour)
		v.APIServerCA = string(down[0].Config.CAData) // another cluster's CA
		installBootstrap(t, down[0], ns, v, register.AgentConfig{ClientID: "wrong-ca"})
		startAgent(t, down[0], ns)
		waitEvent(t, down[0], ns, "RegistrationFailed", "certificate")
		if err := down[0].Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: register.BootstrapSecretName}, &corev1.Secret{}); err != nil {
			t.Errorf("bootstrap secret must be kept: %v", err)
		}
		if len(clustersByClientID(t, "wrong-ca")) != 0 {
			t.Errorf("a cluster was registered through an untrusted CA")
		}
	})
}

func waitRefused(t *testing.T, reg *fleet.ClusterRegistration, reason string) {
	t.Helper()
	eventually(t, "registration refused with "+reason, func() error {
		got := &fleet.ClusterRegistration{}
		if err := up.Client.Get(context.Background(), client.ObjectKeyFromObject(reg), got); err != nil {
			return err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, registration.ConditionGranted)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != reason || got.Status.Granted {
			return fmt.Errorf("conditions %+v granted=%v", got.Status.Conditions, got.Status.Granted)
		}
		return nil
	})
}

// waitEvent waits for a Warning event with reason whose message contains text.
func waitEvent(t *testing.T, d *testenv.Cluster, ns, reason, text string) {
	t.Helper()
	eventually(t, "event "+reason, func() error {
		var list corev1.EventList
		if err := d.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Reason == reason && strings.Contains(e.Message, text) {
				if strings.Contains(e.Message, "eyJ") {
					t.Errorf("event message contains a token: %s", e.Message)
				}
				return nil
			}
		}
		return fmt.Errorf("no %s event containing %q among %d events", reason, text, len(list.Items))
	})
}
