package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/manager"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// Windows of the test's Schedule: one opens every 20 s and stays open 8 s,
// so each closed period lasts 12 s, enough to change the Bundle and watch
// the change being held; the overlap check accepts 8 s < 20 s.
const (
	scheduleCron     = "*/20 * * * * *"
	scheduleDuration = 8 * time.Second
	// heldAttempts bounds how many closed periods are tried for one
	// observation made entirely outside a window.
	heldAttempts = 5
	// heldTicks is how many reads, 250 ms apart, must show the change held.
	heldTicks = 12
)

// scheduleRuns numbers the runs of TestScheduleHoldsChangesOutsideWindows
// in this process (-count): each gets its own workspace and downstream
// namespace.
var scheduleRuns int

// scheduleCase is one run's manager-side names and its registered cluster.
type scheduleCase struct {
	ctx     context.Context
	ws, app string
	cluster fleet.Cluster
	dir     string
	// bundle is the name `fleet apply` gave the Bundle, and so its
	// BundleDeployment.
	bundle string
}

// TestScheduleHoldsChangesOutsideWindows: the manager (Schedules enabled)
// and a real agent on a separate downstream cluster. A Schedule with short,
// frequent windows covers the registered cluster; a Bundle change made
// outside a window reaches the BundleDeployment (offSchedule=true) but not
// downstream, and lands once a window opens; deleting the Schedule clears
// the cluster's flags and the deployment's offSchedule.
func TestScheduleHoldsChangesOutsideWindows(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	scheduleRuns++
	sc := &scheduleCase{ctx: ctx, ws: fmt.Sprintf("e2e-schedule-%d", scheduleRuns), dir: t.TempDir()}
	sc.app = sc.ws + "-app"
	up := upstream.Client

	startScheduleManager(t, ctx)
	g.Expect(up.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sc.ws}})).To(Succeed())
	cluster, agentDone := sc.registerAgent(t)
	sc.cluster = cluster
	defer func() {
		cancel()
		select {
		case <-agentDone:
		case <-time.After(30 * time.Second):
			t.Error("agent did not stop after its context was cancelled")
		}
	}()

	// v1 deploys at once: no Schedule covers the cluster yet.
	sc.apply(t, "v1")
	bundles := &fleet.BundleList{}
	g.Expect(up.List(ctx, bundles, client.InNamespace(sc.ws))).To(Succeed())
	g.Expect(bundles.Items).To(HaveLen(1))
	sc.bundle = bundles.Items[0].Name
	g.Eventually(func(g Gomega) {
		g.Expect(sc.downstreamMessage(g)).To(Equal("v1"))
		bd := sc.deployment(g)
		g.Expect(bd.Status.AppliedDeploymentID).To(Equal(bd.Spec.DeploymentID))
		g.Expect(bd.Spec.OffSchedule).To(BeFalse())
	}, 120*time.Second, 500*time.Millisecond).Should(Succeed())

	s := &fleet.Schedule{ObjectMeta: metav1.ObjectMeta{Namespace: sc.ws, Name: "often"}, Spec: fleet.ScheduleSpec{
		Schedule: scheduleCron, Duration: metav1.Duration{Duration: scheduleDuration}, Location: "UTC",
		Targets: fleet.ScheduleTargets{Clusters: []fleet.ScheduleTarget{{ClusterName: cluster.Name}}},
	}}
	g.Expect(up.Create(ctx, s)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := &fleet.Schedule{}
		g.Expect(up.Get(ctx, client.ObjectKeyFromObject(s), got)).To(Succeed())
		ready := false
		for _, c := range got.Status.Conditions {
			ready = ready || (c.Type == fleet.ConditionReady && c.Status == metav1.ConditionTrue)
		}
		g.Expect(ready).To(BeTrue(), "Ready: %+v", got.Status.Conditions)
		g.Expect(got.Status.MatchingClusters).To(ConsistOf(cluster.Name))
		g.Expect(sc.clusterNow(g).Status.Scheduled).To(BeTrue())
	}, 60*time.Second, 250*time.Millisecond).Should(Succeed())

	// A change made outside a window is held; retried in a later closed
	// period when a window opens before the observation is complete.
	version, held := 1, false
	for attempt := 0; attempt < heldAttempts && !held; attempt++ {
		sc.waitDeployed(t, fmt.Sprintf("v%d", version))
		sc.waitForWindowToClose(t, s)
		version++
		held = sc.observeHeld(t, s, fmt.Sprintf("v%d", version-1), fmt.Sprintf("v%d", version))
	}
	g.Expect(held).To(BeTrue(), "no closed period of %d lasted through the observation", heldAttempts)

	// The held change lands once a window has opened.
	latest, sawOpen := fmt.Sprintf("v%d", version), false
	g.Eventually(func(g Gomega) {
		sawOpen = sawOpen || sc.clusterNow(g).Status.ActiveSchedule
		g.Expect(sawOpen).To(BeTrue(), "no window opened yet")
		g.Expect(sc.downstreamMessage(g)).To(Equal(latest))
		bd := sc.deployment(g)
		g.Expect(bd.Status.AppliedDeploymentID).To(Equal(bd.Spec.DeploymentID))
	}, 90*time.Second, 250*time.Millisecond).Should(Succeed())

	// Deleting the Schedule clears the flags; the deployment is no longer
	// off schedule.
	g.Expect(up.Delete(ctx, s)).To(Succeed())
	g.Eventually(func(g Gomega) {
		c := sc.clusterNow(g)
		g.Expect(c.Status.Scheduled).To(BeFalse())
		g.Expect(c.Status.ActiveSchedule).To(BeFalse())
		g.Expect(sc.deployment(g).Spec.OffSchedule).To(BeFalse())
		err := up.Get(ctx, client.ObjectKeyFromObject(s), &fleet.Schedule{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the Schedule is still there (%v)", err)
	}, 60*time.Second, 250*time.Millisecond).Should(Succeed())
}

// startScheduleManager runs a manager with Schedules enabled until ctx
// ends or the test ends (stopManager waits for it to stop).
func startScheduleManager(t *testing.T, ctx context.Context) {
	t.Helper()
	mctx, cancel := context.WithCancel(ctx)
	mgr, err := manager.New(mctx, upstream.Config, manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", WebhookAddr: "0",
		AgentCheckinInterval: 5 * time.Second, Schedules: true,
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	stopManager(t, func() error { return mgr.Start(mctx) }, cancel)
}

// stopManager runs start (a manager's Start) in the background and, when
// the test ends, cancels its context and waits for it to return, so that
// the managers of consecutive tests never run at the same time.
func stopManager(t *testing.T, start func() error, cancel context.CancelFunc) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := start(); err != nil {
			t.Logf("manager stopped: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("manager still running 30s after its context was cancelled; waiting")
			<-done
		}
	})
}

// registerAgent registers the downstream cluster in the run's workspace
// as fleettest.RegisterAgent does, but under a clientID of the run's own:
// the manager refuses a clientID that a Cluster of another workspace (an
// earlier run, another test of this package) already has.
func (sc *scheduleCase) registerAgent(t *testing.T) (fleet.Cluster, <-chan error) {
	t.Helper()
	g := NewWithT(t)
	labels := map[string]string{"e2e-schedule": sc.ws}
	resetDownstreamAgent(t, sc.ctx)
	// Runs after the test's deferred calls have stopped the agent: the
	// package's other tests register the downstream cluster afresh.
	t.Cleanup(func() { resetDownstreamAgent(t, context.Background()) })
	g.Expect(fleettest.InstallBootstrap(sc.ctx, upstream.Client, downstream.Client, fleettest.Bootstrap{
		Workspace: sc.ws, TokenName: sc.ws + "-token", Labels: labels,
	})).To(Succeed())
	cfg, err := json.Marshal(register.AgentConfig{Labels: labels, ClientID: sc.ws})
	g.Expect(err).NotTo(HaveOccurred())
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: fleet.DefaultSystemNamespace, Name: register.ConfigMapName}}
	g.Expect(downstream.Client.Patch(sc.ctx, cm, client.RawPatch(types.MergePatchType,
		[]byte(fmt.Sprintf(`{"data":{"config":%q}}`, cfg))))).To(Succeed())
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(sc.ctx, agent.Options{Downstream: downstream.Config, CheckinInterval: 5 * time.Second, FirstCheckinDelay: time.Second})
	}()
	cluster, err := fleettest.WaitForCluster(sc.ctx, upstream.Client, sc.ws, labels, 120*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cluster.Spec.ClientID).To(Equal(sc.ws))
	return cluster, done
}

// resetDownstreamAgent removes what a registration (another test of this
// package, an earlier -count run, this run) left in the downstream agent
// namespace, so that the next agent registers anew with its own token
// instead of reusing the stored credential.
func resetDownstreamAgent(t *testing.T, ctx context.Context) {
	t.Helper()
	ns := fleet.DefaultSystemNamespace
	for _, obj := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: register.AgentSecretName}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: register.BootstrapSecretName}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: register.ConfigMapName}},
	} {
		NewWithT(t).Expect(client.IgnoreNotFound(downstream.Client.Delete(ctx, obj))).To(Succeed())
	}
}

// apply writes the ConfigMap with message and runs `fleet apply`.
func (sc *scheduleCase) apply(t *testing.T, message string) {
	t.Helper()
	g := NewWithT(t)
	app := filepath.Join(sc.dir, "app")
	g.Expect(os.MkdirAll(app, 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(app, "fleet.yaml"), []byte("defaultNamespace: "+sc.app+"\n"), 0o644)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(app, "cm.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: greeting\ndata:\n  message: "+message+"\n"), 0o644)).To(Succeed())
	targets := filepath.Join(sc.dir, "targets.yaml")
	g.Expect(os.WriteFile(targets, []byte("targets:\n- clusterSelector:\n    matchLabels:\n      e2e-schedule: "+sc.ws+"\n"), 0o644)).To(Succeed())
	out, err := runFleet("-n", sc.ws, "apply", "--targets-file", targets, "sched", app)
	g.Expect(err).NotTo(HaveOccurred(), out)
}

func (sc *scheduleCase) downstreamMessage(g Gomega) string {
	cm := &corev1.ConfigMap{}
	g.Expect(downstream.Client.Get(sc.ctx, client.ObjectKey{Namespace: sc.app, Name: "greeting"}, cm)).To(Succeed())
	return cm.Data["message"]
}

func (sc *scheduleCase) deployment(g Gomega) *fleet.BundleDeployment {
	bd := &fleet.BundleDeployment{}
	g.Expect(upstream.Client.Get(sc.ctx, client.ObjectKey{Namespace: sc.cluster.Status.Namespace, Name: sc.bundle}, bd)).To(Succeed())
	return bd
}

func (sc *scheduleCase) clusterNow(g Gomega) *fleet.Cluster {
	c := &fleet.Cluster{}
	g.Expect(upstream.Client.Get(sc.ctx, client.ObjectKeyFromObject(&sc.cluster), c)).To(Succeed())
	return c
}

// waitDeployed waits until message is what runs downstream and the
// deployment reports its deploymentID applied.
func (sc *scheduleCase) waitDeployed(t *testing.T, message string) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(sc.downstreamMessage(g)).To(Equal(message))
		bd := sc.deployment(g)
		g.Expect(bd.Status.AppliedDeploymentID).To(Equal(bd.Spec.DeploymentID))
	}, 90*time.Second, 250*time.Millisecond).Should(Succeed())
}

// waitForWindowToClose waits for a window to open and then close, so that
// a whole closed period lies ahead; the Schedule reports the cluster.
func (sc *scheduleCase) waitForWindowToClose(t *testing.T, s *fleet.Schedule) {
	t.Helper()
	g := NewWithT(t)
	g.Eventually(func(g Gomega) {
		g.Expect(sc.clusterNow(g).Status.ActiveSchedule).To(BeTrue())
	}, 90*time.Second, 250*time.Millisecond).Should(Succeed(), "no window opened")
	g.Eventually(func(g Gomega) {
		c := sc.clusterNow(g)
		g.Expect(c.Status.Scheduled).To(BeTrue())
		g.Expect(c.Status.ActiveSchedule).To(BeFalse())
	}, 90*time.Second, 250*time.Millisecond).Should(Succeed(), "the window did not close")
}

// observeHeld applies next while the cluster is outside a window and
// watches it being held: the deployment gets next's deploymentID with
// offSchedule=true, the Bundle shows it WaitApplied, and old keeps running
// downstream, for heldTicks reads in a row. Each read ends by checking that
// the cluster is still outside a window and that no window started (the
// Schedule's nextStartTime is unchanged); otherwise the observation is
// inconclusive and false is returned. What runs downstream is asserted
// only on reads made outside a window.
func (sc *scheduleCase) observeHeld(t *testing.T, s *fleet.Schedule, old, next string) bool {
	t.Helper()
	g := NewWithT(t)
	nextStart := sc.nextStart(g, s)
	prevID := sc.deployment(g).Spec.DeploymentID
	sc.apply(t, next)
	ticks, pending := 0, "not read yet"
	for ticks < heldTicks {
		time.Sleep(250 * time.Millisecond)
		msg := sc.downstreamMessage(g)
		bd := sc.deployment(g)
		b := &fleet.Bundle{}
		g.Expect(upstream.Client.Get(sc.ctx, client.ObjectKey{Namespace: sc.ws, Name: sc.bundle}, b)).To(Succeed())
		if sc.clusterNow(g).Status.ActiveSchedule || !sc.nextStart(g, s).Time.Equal(nextStart.Time) {
			t.Logf("a window opened during the observation of %s (%d reads held, last pending: %s); trying again in the next closed period", next, ticks, pending)
			return false
		}
		g.Expect(msg).To(Equal(old), "%s was deployed downstream outside a window (deployment offSchedule=%v)", next, bd.Spec.OffSchedule)
		switch {
		case bd.Spec.DeploymentID == prevID:
			pending = "the deployment has not got the change yet"
		case !bd.Spec.OffSchedule:
			pending = "the deployment has the change but offSchedule=false"
		case b.Status.Summary.WaitApplied != 1:
			pending = fmt.Sprintf("the Bundle's summary is %+v, not WaitApplied", b.Status.Summary)
		default:
			g.Expect(bd.Status.AppliedDeploymentID).To(Equal(prevID), "the agent reports the held deploymentID applied")
			pending = ""
		}
		if pending != "" {
			g.Expect(ticks).To(BeZero(), "the held state did not last outside a window: %s", pending)
			continue
		}
		ticks++
	}
	t.Logf("%s held (offSchedule=true, %s still downstream) for %d reads outside a window", next, old, ticks)
	return true
}

func (sc *scheduleCase) nextStart(g Gomega, s *fleet.Schedule) metav1.Time {
	got := &fleet.Schedule{}
	g.Expect(upstream.Client.Get(sc.ctx, client.ObjectKeyFromObject(s), got)).To(Succeed())
	return got.Status.NextStartTime
}
