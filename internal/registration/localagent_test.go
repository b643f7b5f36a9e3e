package registration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/registration"
)

// localOffNamespace is the bootstrap namespace of the managers
// TestLocalAgentDisabled starts itself; the shared manager does not see
// it.
const localOffNamespace = "local-off"

// TestLocalAgentDisabled restarts a manager of its own bootstrap
// namespace with and without LocalAgentDisabled (what a helm upgrade with
// bootstrap.localAgentDisabled does), its Cluster "local" importing the
// management cluster (up) into namespace localOffAgentNS:
//   - disabled from the start, no agent is installed; the Cluster stays,
//     with Imported=False and an Event saying why;
//   - enabled, the agent is installed, and registers; disabled again, the
//     Deployment goes first, and while a pod of the agent is left the
//     rest stays (the Cluster says it waits); once it is gone the objects
//     the manager made and the credential the agent stored are removed
//     from up, the rest of the namespace (a user's ConfigMap and Secret)
//     stays, another imported Cluster of the namespace keeps its agent,
//     and so does an agent of this Cluster the manager did not install
//     (foreignAgent), credential included;
//   - enabled again, the agent installed anew registers with its
//     bootstrap token and checks in; disabled again, a Secret fleet-agent
//     there naming another Cluster stays;
//   - enabled again, its removal is held by a Deployment the manager did
//     not make, and finishes once the removal is resumed
//     (checkRemovalHeld);
//   - Cluster "local" pointed at another cluster (down[0]), whose
//     kube-system UID is not the management cluster's: its agent is left
//     alone, and the Cluster says so.
func TestLocalAgentDisabled(t *testing.T) {
	ctx := context.Background()
	const agentNS = "local-off-agent"
	createKubeconfigSecret(t, down[0], localOffNamespace, "elsewhere-kubeconfig")
	createKubeconfigSecret(t, down[0], localOffNamespace, "other-kubeconfig")
	local := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: fleet.LocalClusterName, Namespace: localOffNamespace, Labels: map[string]string{"name": "local"}},
		Spec: fleet.ClusterSpec{KubeConfigSecret: "local-cluster", AgentNamespace: agentNS}}
	other := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: localOffNamespace},
		Spec: fleet.ClusterSpec{KubeConfigSecret: "other-kubeconfig", AgentNamespace: "local-off-other"}}
	for _, c := range []*fleet.Cluster{local, other} {
		if err := up.Client.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	withLocalAgent := func(disabled bool) (stop func()) {
		return startLocalOffManager(t, registration.Options{APIServerURL: up.Config.Host, APIServerCA: up.Config.CAData,
			BootstrapNamespace: localOffNamespace, LocalAgentDisabled: disabled})
	}

	stop := withLocalAgent(true)
	waitLocalAgentOff(t, local, registration.ReasonLocalAgentDisabled)
	waitImported(t, other)
	if err := up.Client.Get(ctx, client.ObjectKey{Namespace: agentNS, Name: "fleet-agent"}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Errorf("local agent with localAgentDisabled: want none, got %v", err)
	}
	waitEvent(t, up, localOffNamespace, registration.ReasonLocalAgentDisabled, "installs no agent")
	stop()

	stop = withLocalAgent(false)
	waitImported(t, local)
	agentDeployment(t, up, agentNS)
	// The agent (in-process, as the Deployment would run it) registers
	// and stores its credential, Secret fleet-agent.
	stopAgent := startAgent(t, up, agentNS)
	oldCred := waitLocalAgentRegistered(t, local, agentNS, time.Time{})
	stopAgent()
	stop()
	mine := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "keep-me", Namespace: agentNS}}
	mySecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "keep-me-too", Namespace: agentNS},
		Data: map[string][]byte{register.KeyClusterNamespace: []byte(localOffNamespace), register.KeyClusterName: []byte(fleet.LocalClusterName)}}
	for _, o := range []client.Object{mine, mySecret} {
		if err := up.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	foreign := foreignAgent(t, local, "local-off-foreign")
	// envtest runs no kube-controller-manager: this pod stands for the
	// one the agent's Deployment would run.
	pod := agentPod(t, agentNS)

	stop = withLocalAgent(true)
	eventually(t, "local agent's Deployment removed", func() error {
		err := up.Client.Get(ctx, client.ObjectKey{Namespace: agentNS, Name: "fleet-agent"}, &appsv1.Deployment{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("local agent deployment: %v", err)
		}
		return nil
	})
	waitLocalAgentMessage(t, local, "still stopping")
	for _, o := range []client.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: agentNS}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: register.AgentSecretName, Namespace: agentNS}}} {
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Errorf("local agent's %T %s while its pod is left: want it kept, got %v", o, client.ObjectKeyFromObject(o), err)
		}
	}
	if err := up.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	c := waitLocalAgentMessage(t, local, "removed the one it had installed")
	if c.Status.AgentDeployedNamespace != "" || c.Status.AgentConfigHash != "" || c.Status.AgentDeployedGeneration != nil || c.Status.Namespace == "" {
		t.Errorf("status after the removal: agentDeployedNamespace %q, agentConfigHash %q, agentDeployedGeneration %v, namespace %q",
			c.Status.AgentDeployedNamespace, c.Status.AgentConfigHash, c.Status.AgentDeployedGeneration, c.Status.Namespace)
	}
	for _, o := range []client.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: agentNS}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: agentNS}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: register.AgentSecretName, Namespace: agentNS}}} {
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			t.Errorf("local agent's %T %s: want it deleted, got %v", o, client.ObjectKeyFromObject(o), err)
		}
	}
	for _, o := range append([]client.Object{mine, mySecret, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNS}}}, foreign...) {
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Errorf("%T %s the manager did not make: %v", o, client.ObjectKeyFromObject(o), err)
		}
	}
	agentDeployment(t, down[0], "local-off-other")
	// The shared manager's local agent, another Cluster's, is untouched.
	agentDeployment(t, up, fleet.DefaultSystemNamespace)
	stop()

	// Enabled again: the agent installed anew registers with its
	// bootstrap token (no credential is left to reuse) and checks in.
	stop = withLocalAgent(false)
	waitImported(t, local)
	since := time.Now()
	stopAgent = startAgent(t, up, agentNS)
	if cred := waitLocalAgentRegistered(t, local, agentNS, since); cred.UID == oldCred.UID {
		t.Errorf("the agent installed again kept the removed agent's credential")
	}
	stopAgent()
	stop()
	// Disabled again before the move below, which a recorded agent would
	// refuse. A Secret fleet-agent naming another Cluster is not this
	// agent's credential: it stays.
	renamed := renameCredential(t, agentNS, other.Name)
	stop = withLocalAgent(true)
	waitLocalAgentMessage(t, local, "removed the one it had installed")
	err := up.Client.Get(ctx, client.ObjectKey{Namespace: agentNS, Name: "fleet-agent"}, &corev1.ConfigMap{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("local agent's ConfigMap after the second removal: %v", err)
	}
	if err := up.Client.Get(ctx, client.ObjectKeyFromObject(renamed), renamed); err != nil {
		t.Errorf("Secret fleet-agent naming Cluster %s: want it kept, got %v", other.Name, err)
	}
	stop()
	if err := up.Client.Delete(ctx, renamed); err != nil {
		t.Fatal(err)
	}
	checkRemovalHeld(t, local, agentNS, withLocalAgent)

	editCluster(t, local, func(s *fleet.ClusterSpec) { s.KubeConfigSecret = "elsewhere-kubeconfig" })
	stop = withLocalAgent(false)
	waitImportedAt(t, local)
	agentDeployment(t, down[0], agentNS)
	stop()

	withLocalAgent(true)
	waitLocalAgentOff(t, local, registration.ReasonLocalClusterMismatch)
	waitEvent(t, up, localOffNamespace, registration.ReasonLocalClusterMismatch, "kube-system")
	agentDeployment(t, down[0], agentNS)
}

// waitLocalAgentOff waits for Imported=False with reason on cluster and
// returns it.
func waitLocalAgentOff(t *testing.T, cluster *fleet.Cluster, reason string) *fleet.Cluster {
	t.Helper()
	c := &fleet.Cluster{}
	eventually(t, "Imported=False "+reason, func() error {
		if err := up.Client.Get(context.Background(), client.ObjectKeyFromObject(cluster), c); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, fleet.ConditionImported)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != reason {
			return fmt.Errorf("imported condition %+v", cond)
		}
		return nil
	})
	return c
}

// waitLocalAgentRegistered waits until the agent in agentNS of up has
// registered cluster from its bootstrap Secret (which it then deletes) and
// checked in after since, and returns the credential it stored, which
// must work upstream.
func waitLocalAgentRegistered(t *testing.T, cluster *fleet.Cluster, agentNS string, since time.Time) *corev1.Secret {
	t.Helper()
	ctx := context.Background()
	cred := &corev1.Secret{}
	c := &fleet.Cluster{}
	eventually(t, "local agent registered and checked in", func() error {
		err := up.Client.Get(ctx, client.ObjectKey{Namespace: agentNS, Name: register.BootstrapSecretName}, &corev1.Secret{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("bootstrap secret not used yet: %v", err)
		}
		if err := up.Client.Get(ctx, client.ObjectKey{Namespace: agentNS, Name: register.AgentSecretName}, cred); err != nil {
			return err
		}
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c); err != nil {
			return err
		}
		if seen := c.Status.Agent.LastSeen; !seen.After(since) {
			return fmt.Errorf("lastSeen %v not after %v", seen, since)
		}
		return nil
	})
	if got := string(cred.Data[register.KeyClusterName]); got != cluster.Name {
		t.Errorf("credential names cluster %q, want %q", got, cluster.Name)
	}
	cfg, _ := agentConfig(t, up, agentNS)
	if err := clientFor(t, cfg).List(ctx, &fleet.BundleDeploymentList{}, client.InNamespace(c.Status.Namespace)); err != nil {
		t.Errorf("the agent's credential does not work: %v", err)
	}
	return cred
}

// startLocalOffManager runs a manager for localOffNamespace only, with
// opts (2 workers); stop ends it and waits until it has stopped, and runs
// when the test ends.
func startLocalOffManager(t *testing.T, opts registration.Options) (stop func()) {
	t.Helper()
	opts.Workers = 2
	ctx, cancel := context.WithCancel(context.Background())
	done, err := startManager(ctx, opts, map[string]cache.Config{localOffNamespace: {}})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

// foreignAgent creates in ns of up an agent for cluster that the manager
// did not install, as a Helm release of Rancher Fleet's fleet-agent chart
// would leave it: its ConfigMap fleet-agent names the Cluster's clientID
// (so the removal looks at ns), its Deployment runs, and its credential
// names the Cluster. It returns them, all of which must stay.
func foreignAgent(t *testing.T, cluster *fleet.Cluster, ns string) []client.Object {
	t.Helper()
	ctx := context.Background()
	c := &fleet.Cluster{}
	if err := up.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c); err != nil {
		t.Fatal(err)
	}
	cfg, err := json.Marshal(registration.AgentConfig{ClientID: c.Spec.ClientID})
	if err != nil {
		t.Fatal(err)
	}
	helm := map[string]string{registration.AgentManagedByLabel: "Helm"}
	labels := map[string]string{"app": "fleet-agent"}
	om := func(name string, l map[string]string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l}
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ConfigMap{ObjectMeta: om("fleet-agent", helm), Data: map[string]string{"config": string(cfg)}},
		&appsv1.Deployment{ObjectMeta: om("fleet-agent", helm), Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "fleet-agent", Image: "rancher/fleet-agent"}}}},
		}},
		&corev1.Secret{ObjectMeta: om(register.AgentSecretName, nil), Data: map[string][]byte{
			register.KeyKubeconfig: []byte("apiVersion: v1\nkind: Config\n"), register.KeyClusterNamespace: []byte(c.Namespace),
			register.KeyClusterName: []byte(c.Name)}},
	}
	for _, o := range objs {
		if err := up.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	return objs
}

// agentPod creates in ns of up a pod as the agent's Deployment would
// run it: label app=fleet-agent, controlled by the ReplicaSet named after
// its pod-template-hash (gone already).
func agentPod(t *testing.T, ns string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent-stopping", Namespace: ns,
		Labels:          map[string]string{"app": "fleet-agent", appsv1.DefaultDeploymentUniqueLabelKey: "5d8f"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "fleet-agent-5d8f", UID: "fleet-agent-5d8f", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{ServiceAccountName: "fleet-agent", AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "fleet-agent", Image: "rancher/fleet-agent"}}}}
	if err := up.Client.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

// renameCredential makes the credential Secret fleet-agent in ns of up
// name Cluster name of localOffNamespace, and returns it.
func renameCredential(t *testing.T, ns, name string) *corev1.Secret {
	t.Helper()
	cred := &corev1.Secret{}
	if err := up.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: register.AgentSecretName}, cred); err != nil {
		t.Fatal(err)
	}
	cred.Data[register.KeyClusterName] = []byte(name)
	if err := up.Client.Update(context.Background(), cred); err != nil {
		t.Fatal(err)
	}
	return cred
}

// waitLocalAgentMessage waits for Imported=False with reason
// LocalAgentDisabled and a message containing part on cluster, and
// returns it.
func waitLocalAgentMessage(t *testing.T, cluster *fleet.Cluster, part string) *fleet.Cluster {
	t.Helper()
	c := &fleet.Cluster{}
	eventually(t, "Imported=False LocalAgentDisabled, "+part, func() error {
		if err := up.Client.Get(context.Background(), client.ObjectKeyFromObject(cluster), c); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, fleet.ConditionImported)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != registration.ReasonLocalAgentDisabled || !strings.Contains(cond.Message, part) {
			return fmt.Errorf("imported condition %+v", cond)
		}
		return nil
	})
	return c
}

// checkRemovalHeld installs the agent of cluster in agentNS again with
// withLocalAgent, and replaces its Deployment by one the manager did not
// make, which runs with the agent's ConfigMap and a credential stored for
// cluster. Disabled, the removal is held: nothing more is deleted there,
// the namespace stays recorded, and the Cluster and a Warning Event say
// why. That Deployment then deleted, the next start finishes the
// removal, credential and ConfigMap included.
func checkRemovalHeld(t *testing.T, cluster *fleet.Cluster, agentNS string, withLocalAgent func(bool) func()) {
	t.Helper()
	ctx := context.Background()
	stop := withLocalAgent(false)
	waitImported(t, cluster)
	deployment := agentDeployment(t, up, agentNS)
	stop()
	if err := up.Client.Delete(ctx, deployment); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "fleet-agent"}
	foreign := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: agentNS,
		Labels: map[string]string{registration.AgentManagedByLabel: "Helm"}}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "fleet-agent", Image: "rancher/fleet-agent"}}}},
	}}
	cred := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: register.AgentSecretName, Namespace: agentNS}, Data: map[string][]byte{
		register.KeyKubeconfig: []byte("apiVersion: v1\nkind: Config\n"), register.KeyClusterNamespace: []byte(cluster.Namespace),
		register.KeyClusterName: []byte(cluster.Name)}}
	for _, o := range []client.Object{foreign, cred} {
		if err := up.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	configMap := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: agentNS}}
	serviceAccount := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: agentNS}}
	kept := []client.Object{foreign, cred, configMap, serviceAccount,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: register.BootstrapSecretName, Namespace: agentNS}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: agentNS + "-fleet-agent-role"}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: agentNS + "-fleet-agent-role-binding"}}}

	stop = withLocalAgent(true)
	c := waitLocalAgentMessage(t, cluster, "the manager did not make runs there")
	waitEvent(t, up, localOffNamespace, registration.ReasonLocalAgentDisabled, "did not make")
	if c.Status.AgentDeployedNamespace != agentNS {
		t.Errorf("agentDeployedNamespace while the removal is held: %q, want %q", c.Status.AgentDeployedNamespace, agentNS)
	}
	for _, o := range kept {
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Errorf("%T %s while a Deployment the manager did not make runs: want it kept, got %v", o, client.ObjectKeyFromObject(o), err)
		}
	}
	stop()

	if err := up.Client.Delete(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	stop = withLocalAgent(true)
	c = waitLocalAgentMessage(t, cluster, "removed the one it had installed;")
	if c.Status.AgentDeployedNamespace != "" {
		t.Errorf("agentDeployedNamespace after the removal: %q", c.Status.AgentDeployedNamespace)
	}
	for _, o := range []client.Object{cred, serviceAccount, configMap} {
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s after the held removal resumed: want it deleted, got %v", o, client.ObjectKeyFromObject(o), err)
		}
	}
	stop()
}
