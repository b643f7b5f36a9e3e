// Package transitions records Kubernetes Events when a Bundle or a Cluster
// changes state: a deployment starts failing or recovers, a cluster goes
// offline or comes back. It watches the manager's informers (old and new
// object of every update), so events follow transitions and never
// reconciles, and no controller needs to remember what it reported.
// (GitRepo events — new commit, sync failed, recovered — are recorded by
// the GitRepo controller, which knows the sync outcome.)
package transitions

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/summary"
)

// Event reasons.
const (
	ReasonDeployFailed    = "DeployFailed"
	ReasonDeployRecovered = "DeployRecovered"
	ReasonClusterOffline  = "ClusterOffline"
	ReasonClusterOnline   = "ClusterOnline"
)

// maxMessage bounds an event's note (the API server limits it to 1 kB).
const maxMessage = 1000

// Options say which kinds this replica reports.
type Options struct {
	// Clusters reports Cluster transitions (unsharded replica only, since
	// every shard sees every Cluster).
	Clusters bool
}

// Setup adds the watcher to mgr. It runs only on the elected leader.
func Setup(mgr ctrl.Manager, opts Options) error {
	return mgr.Add(&watcher{mgr: mgr, opts: opts, recorder: mgr.GetEventRecorder("fleet-controller")})
}

type watcher struct {
	mgr      ctrl.Manager
	opts     Options
	recorder events.EventRecorder
}

// NeedLeaderElection: only the active replica records events.
func (w *watcher) NeedLeaderElection() bool { return true }

// Info is one event to record.
type Info struct{ Type, Reason, Message string }

func (w *watcher) Start(ctx context.Context) error {
	if err := w.watch(ctx, &fleet.Bundle{}, func(o, n client.Object) []Info {
		return BundleEvents(o.(*fleet.Bundle), n.(*fleet.Bundle))
	}); err != nil {
		return err
	}
	if w.opts.Clusters {
		if err := w.watch(ctx, &fleet.Cluster{}, func(o, n client.Object) []Info {
			return ClusterEvents(o.(*fleet.Cluster), n.(*fleet.Cluster))
		}); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return nil
}

func (w *watcher) watch(ctx context.Context, obj client.Object, diff func(o, n client.Object) []Info) error {
	inf, err := w.mgr.GetCache().GetInformer(ctx, obj)
	if err != nil {
		return fmt.Errorf("informer for %T: %w", obj, err)
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj interface{}) {
			o, ok1 := oldObj.(client.Object)
			n, ok2 := newObj.(client.Object)
			if !ok1 || !ok2 || o.GetResourceVersion() == n.GetResourceVersion() {
				return // resync, not a change
			}
			for _, e := range diff(o, n) {
				w.recorder.Eventf(n, nil, e.Type, e.Reason, e.Reason, "%s", e.Message)
			}
		},
	})
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		_ = inf.RemoveEventHandler(reg)
	}()
	return nil
}

// BundleEvents names the events of a Bundle status change: DeployFailed when
// some deployment enters ErrApplied (none was before), DeployRecovered
// when the last one leaves it.
func BundleEvents(old, cur *fleet.Bundle) []Info {
	was, is := old.Status.Summary.ErrApplied > 0, cur.Status.Summary.ErrApplied > 0
	switch {
	case is && !was:
		return []Info{{Type: corev1.EventTypeWarning, Reason: ReasonDeployFailed,
			Message: truncate(summary.ReadyMessage(cur.Status.Summary, "Cluster"))}}
	case was && !is:
		return []Info{{Type: corev1.EventTypeNormal, Reason: ReasonDeployRecovered,
			Message: fmt.Sprintf("no deployment is failing; ready %s", summary.ReadyCount(cur.Status.Summary))}}
	}
	return nil
}

// ClusterEvents names the events of a Cluster status change: the Offline
// condition turning True, or leaving True. A cluster whose agent never
// checked in is waiting, not offline: registering one is not an incident.
func ClusterEvents(old, cur *fleet.Cluster) []Info {
	if old.Status.Agent.LastSeen.IsZero() {
		return nil
	}
	// A cluster whose status still says it waits for its first check-in
	// (written before the heartbeat arrived) was never online: its first
	// roll-up after the check-in is not a return.
	was := meta.IsStatusConditionTrue(old.Status.Conditions, fleet.ConditionOffline) &&
		meta.FindStatusCondition(old.Status.Conditions, fleet.ConditionOffline).Reason != fleet.ClusterWaitCheckIn
	is := meta.IsStatusConditionTrue(cur.Status.Conditions, fleet.ConditionOffline)
	switch {
	case is && !was:
		msg := "the agent stopped checking in"
		if c := meta.FindStatusCondition(cur.Status.Conditions, fleet.ConditionOffline); c.Message != "" {
			msg = c.Message
		}
		return []Info{{Type: corev1.EventTypeWarning, Reason: ReasonClusterOffline, Message: truncate(msg)}}
	case was && !is:
		return []Info{{Type: corev1.EventTypeNormal, Reason: ReasonClusterOnline, Message: "the agent checks in again"}}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > maxMessage {
		return s[:maxMessage-3] + "..."
	}
	return s
}
