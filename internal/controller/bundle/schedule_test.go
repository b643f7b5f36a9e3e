package bundle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/bundle"
)

// setSchedule writes the Schedule fields of a cluster's status, as the
// schedule controller does.
func setSchedule(t *testing.T, ctx context.Context, c *fleet.Cluster, scheduled, active bool) {
	t.Helper()
	update(t, ctx, c, true, func() {
		c.Status.Scheduled, c.Status.ActiveSchedule = scheduled, active
	})
}

// settle waits until the bundle's reconciles have stopped (none for longer
// than the status write interval), so that only a new event can make the
// next change: a requeue left over from earlier writes would hide a
// missing Cluster watch.
func settle(t *testing.T, b *fleet.Bundle) {
	t.Helper()
	key := client.ObjectKeyFromObject(b)
	eventually(t, 90*time.Second, func() error {
		n := bundle.Reconciles(key)
		time.Sleep(7 * time.Second)
		if m := bundle.Reconciles(key); m != n {
			return fmt.Errorf("%d reconciles meanwhile", m-n)
		}
		return nil
	})
}

// expectOffSchedule waits until the bundle's deployments carry
// spec.offSchedule as want says, per cluster name.
func expectOffSchedule(t *testing.T, ctx context.Context, ns, name string, want map[string]bool) {
	t.Helper()
	// Well below the 30-minute resync: only the Cluster event can do it.
	eventually(t, 60*time.Second, func() error {
		bds, err := bundleDeployments(ctx, ns, name)
		if err != nil {
			return err
		}
		for cl, off := range want {
			bd := bds[cl]
			if bd == nil {
				return fmt.Errorf("no deployment for %s yet", cl)
			}
			if bd.Spec.OffSchedule != off {
				return fmt.Errorf("%s: spec.offSchedule %v, want %v", cl, bd.Spec.OffSchedule, off)
			}
		}
		return nil
	})
}

// scheduleClusters makes workspace ws with two clusters labelled
// sched=label (the labels returned): win, which a test puts under a
// Schedule, and free, which no Schedule covers.
func scheduleClusters(t *testing.T, ctx context.Context, ws, label string) (win *fleet.Cluster, lbls map[string]string) {
	t.Helper()
	createNamespace(t, ctx, ws, nil)
	lbls = map[string]string{"sched": label}
	win = newCluster(t, ctx, ws, "win", lbls, time.Second)
	newCluster(t, ctx, ws, "free", lbls, time.Second)
	return win, lbls
}

// createTargeting creates in ws a Bundle name of one ConfigMap v1 that
// targets the clusters labelled lbls.
func createTargeting(t *testing.T, ctx context.Context, ws, name string, lbls map[string]string) *fleet.Bundle {
	t.Helper()
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name}}
	b.Spec.Resources = resources("kind: ConfigMap\nmetadata:\n  name: v1\n")
	b.Spec.Targets = []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: lbls}}}
	must(t, env.Client.Create(ctx, b))
	return b
}

// A cluster covered by a Schedule outside its windows gets deployments
// marked offSchedule; the window opening, closing and the Schedule going
// away each rewrite them, while an unscheduled cluster is never marked.
func TestOffScheduleFollowsClusterStatus(t *testing.T) {
	ctx := context.Background()
	ws := "ws-sched"
	win, lbls := scheduleClusters(t, ctx, ws, "yes")
	setSchedule(t, ctx, win, true, false)
	b := createTargeting(t, ctx, ws, "sched-app", lbls)
	expectOffSchedule(t, ctx, ws, b.Name, map[string]bool{"win": true, "free": false})

	settle(t, b)
	setSchedule(t, ctx, win, true, true) // the window opens
	expectOffSchedule(t, ctx, ws, b.Name, map[string]bool{"win": false, "free": false})

	settle(t, b)
	setSchedule(t, ctx, win, true, false) // and closes
	expectOffSchedule(t, ctx, ws, b.Name, map[string]bool{"win": true, "free": false})

	settle(t, b)
	setSchedule(t, ctx, win, false, false) // the Schedule no longer covers it
	expectOffSchedule(t, ctx, ws, b.Name, map[string]bool{"win": false, "free": false})
}

// As in Fleet, a new version still reaches an off-schedule cluster's
// deployment (only its agent holds it back): the Bundle shows that cluster
// WaitApplied until its agent applies it in a window.
func TestOffScheduleDeploymentWaitsApplied(t *testing.T) {
	ctx := context.Background()
	ws := "ws-sched-wait"
	win, lbls := scheduleClusters(t, ctx, ws, "wait")
	b := createTargeting(t, ctx, ws, "sched-wait", lbls)
	eventually(t, 60*time.Second, func() error {
		if err := playAgents(ctx, ws, b.Name, nil, nil); err != nil {
			return err
		}
		must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(b), b))
		if b.Status.Summary.Ready != 2 {
			return fmt.Errorf("summary %+v", b.Status.Summary)
		}
		return nil
	})
	settle(t, b)
	setSchedule(t, ctx, win, true, false)
	expectOffSchedule(t, ctx, ws, b.Name, map[string]bool{"win": true})
	bds, err := bundleDeployments(ctx, ws, b.Name)
	must(t, err)
	oldID := bds["win"].Spec.DeploymentID

	update(t, ctx, b, false, func() { b.Spec.Resources = resources("kind: ConfigMap\nmetadata:\n  name: v2\n") })
	eventually(t, 60*time.Second, func() error {
		// Only the unscheduled cluster's agent applies the new version.
		if err := playAgents(ctx, ws, b.Name, nil, map[string]bool{"win": true}); err != nil {
			return err
		}
		bds, err := bundleDeployments(ctx, ws, b.Name)
		if err != nil {
			return err
		}
		if id := bds["win"].Spec.DeploymentID; id == oldID || !bds["win"].Spec.OffSchedule {
			return fmt.Errorf("win: deploymentID %s (old %s), offSchedule %v", id, oldID, bds["win"].Spec.OffSchedule)
		}
		must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(b), b))
		if s := b.Status.Summary; s.WaitApplied != 1 || s.Ready != 1 {
			return fmt.Errorf("summary %+v", s)
		}
		return nil
	})
}

// As in Fleet, a deployment no longer targeted stays while its cluster is
// off schedule (deleting it would make the agent uninstall outside the
// window) and goes when a window opens; deleting the Bundle deletes it at
// once.
func TestOffScheduleHoldsUntargetedDeployment(t *testing.T) {
	ctx := context.Background()
	ws := "ws-sched-untarget"
	win, lbls := scheduleClusters(t, ctx, ws, "untarget")
	setSchedule(t, ctx, win, true, false)
	b := createTargeting(t, ctx, ws, "sched-untarget", lbls)
	other := b.DeepCopy()
	other.Name, other.ResourceVersion = "sched-untarget-deleted", ""
	must(t, env.Client.Create(ctx, other))
	expectOffSchedule(t, ctx, ws, b.Name, map[string]bool{"win": true, "free": false})
	expectOffSchedule(t, ctx, ws, other.Name, map[string]bool{"win": true, "free": false})

	// Neither cluster is targeted any more: only the unscheduled one's
	// deployment goes.
	update(t, ctx, b, false, func() {
		b.Spec.Targets = []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"sched": "none"}}}}
	})
	onlyWin := func() error {
		bds, err := bundleDeployments(ctx, ws, b.Name)
		if err != nil {
			return err
		}
		if got := sortedKeys(bds); len(got) != 1 || got[0] != "win" {
			return fmt.Errorf("deployments for %v, want [win]", got)
		}
		return nil
	}
	eventually(t, 60*time.Second, onlyWin)
	consistently(t, 10*time.Second, onlyWin)

	// Deleting a Bundle removes its deployments on or off schedule.
	must(t, env.Client.Delete(ctx, other))
	eventually(t, 60*time.Second, func() error {
		bds, err := bundleDeployments(ctx, ws, other.Name)
		if err != nil {
			return err
		}
		if len(bds) > 0 {
			return fmt.Errorf("deleted bundle still has deployments for %v", sortedKeys(bds))
		}
		return nil
	})

	setSchedule(t, ctx, win, true, true) // the window opens
	// Well below the 30-minute resync: only the Cluster event can do it.
	eventually(t, 60*time.Second, func() error {
		bds, err := bundleDeployments(ctx, ws, b.Name)
		if err != nil {
			return err
		}
		if len(bds) > 0 {
			return fmt.Errorf("deployments for %v remain in the window", sortedKeys(bds))
		}
		return nil
	})
}
