package harness

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kwait "k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// ScheduleResult is what the schedule scenario measured. Each opening
// and closing of a window flips status.activeSchedule on every covered
// Cluster, and the Bundle controller then rewrites spec.offSchedule of
// every BundleDeployment of those clusters: clusters × bundles writes per
// flip.
type ScheduleResult struct {
	// FlaggedSeconds: Schedule created inside its window -> every
	// simulated Cluster has status.scheduled and activeSchedule. No
	// BundleDeployment changes then (the window is open).
	FlaggedSeconds float64 `json:"flaggedSeconds"`
	// Hold: the window's close (its end by the cron expression and the
	// duration) -> each BundleDeployment has spec.offSchedule=true.
	Hold         Timing    `json:"hold"`
	HoldRequests *Requests `json:"holdRequests,omitempty"`
	// HoldBundleDeploymentWrites counts the manager's writes of
	// BundleDeployments (not their status) during the hold, from the
	// audit log; ReleaseBundleDeploymentWrites the same for the release.
	HoldBundleDeploymentWrites int `json:"holdBundleDeploymentWrites"`
	// HeldChange: a change of the first bundle while the window is closed
	// -> each of its BundleDeployments has the new deploymentID and is
	// still off schedule.
	HeldChange Timing `json:"heldChange"`
	// HeldSettleSeconds is how long the manager then took to roll the
	// held change up (the changed bundle WaitApplied everywhere), which
	// the harness waits for before opening the window.
	HeldSettleSeconds float64 `json:"heldSettleSeconds,omitempty"`
	// AppliedWhileHeld counts deployments whose agent applied the held
	// change before the window opened: it must be 0.
	AppliedWhileHeld int `json:"appliedWhileHeld"`
	// ReleaseWritten: the next window's opening -> each BundleDeployment
	// has spec.offSchedule=false (the manager's share); Release: -> each
	// is also Ready, the changed bundle's with its new deploymentID.
	ReleaseWritten                Timing    `json:"releaseWritten"`
	Release                       Timing    `json:"release"`
	ReleaseRequests               *Requests `json:"releaseRequests,omitempty"`
	ReleaseBundleDeploymentWrites int       `json:"releaseBundleDeploymentWrites"`
}

const (
	scheduleName = "scale-window"
	// flipLead is how far ahead of a spec change the harness puts a
	// window's close or opening: the manager takes the change in well
	// before, so the flip happens at the cron moment, as in production.
	flipLead = 3 * time.Second
	// windowLength is the duration of a window the harness keeps open
	// (longer than any phase it measures); starts are a day apart.
	windowLength = time.Hour
)

// scheduleRun drives the schedule scenario after the creation, with the
// harness's tracker, phase marks and request counts.
type scheduleRun struct {
	c        client.Client
	tr       *tracker
	sc       Scenario
	timeout  time.Duration
	res      *Result
	mark     func(phase string)
	requests func(from, to time.Time) (*Requests, error)
	logf     func(format string, args ...any)
	prof     *profiler
	children []*child

	// windowStart is the start of the window open when the Schedule was
	// created; heldFrom the changed bundle's deploymentIDs before the
	// change made while closed.
	windowStart time.Time
	heldFrom    map[string]string
}

// run measures, in turn: the Schedule's creation inside an open window,
// the window's close (hold), a bundle change while closed, and the next
// window's opening (release). A phase that does not finish is reported
// and ends the scenario; an error means the API refused a write.
func (s *scheduleRun) run(ctx context.Context) error {
	r := &ScheduleResult{}
	s.res.Schedule = r
	s.logf("waiting for the manager to roll the creation up")
	waited, err := settle(ctx, s.c, s.sc.Clusters, s.sc.Bundles, s.timeout)
	s.res.SettleSeconds = waited.Seconds()
	if err != nil {
		s.res.problem("the creation was not rolled up after %s (%v); the schedule phases share the API server with it", waited.Round(time.Second), err)
	}
	s.mark("settle")
	for _, step := range []func(context.Context, *ScheduleResult) (bool, error){s.open, s.hold, s.change, s.release} {
		if ok, err := step(ctx, r); err != nil || !ok {
			return err
		}
	}
	return nil
}

// open creates a Schedule over every simulated cluster whose window
// started a second ago, and waits until every Cluster is flagged.
func (s *scheduleRun) open(ctx context.Context, r *ScheduleResult) (bool, error) {
	s.windowStart = time.Now().UTC().Truncate(time.Second).Add(-time.Second)
	sch := &fleet.Schedule{ObjectMeta: metav1.ObjectMeta{Name: scheduleName, Namespace: workspace},
		Spec: fleet.ScheduleSpec{Schedule: dailyAt(s.windowStart), Duration: metav1.Duration{Duration: windowLength}, Location: "UTC",
			Targets: fleet.ScheduleTargets{Clusters: []fleet.ScheduleTarget{{Name: "all",
				ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{targetLabel: "true"}}}}}}}
	s.logf("creating Schedule %s (window open since %s)", scheduleName, s.windowStart.Format(time.TimeOnly))
	if err := s.c.Create(ctx, sch); err != nil {
		return false, fmt.Errorf("creating the Schedule: %w", err)
	}
	waited, err := s.waitClusters(ctx, func(c *fleet.Cluster) bool { return c.Status.Scheduled && c.Status.ActiveSchedule })
	r.FlaggedSeconds = waited.Seconds()
	s.logf("schedule: %d clusters flagged in %.1fs", s.sc.Clusters, r.FlaggedSeconds)
	if err != nil {
		s.res.problem("the Schedule's clusters were not flagged scheduled and active: %v (Schedule: %s)", err, s.scheduleState(ctx))
		return false, nil
	}
	if n := s.tr.count(func(_ string, bd *fleet.BundleDeployment) bool { return bd.Spec.OffSchedule }); n > 0 {
		s.res.problem("%d BundleDeployments are off schedule while the window is open", n)
	}
	return true, nil
}

// hold moves the open window's end to a moment just ahead and times its
// close: every BundleDeployment must get spec.offSchedule.
func (s *scheduleRun) hold(ctx context.Context, r *ScheduleResult) (bool, error) {
	closeAt := time.Now().UTC().Truncate(time.Second).Add(flipLead)
	if err := s.patchSpec(ctx, func(spec *fleet.ScheduleSpec) {
		spec.Duration = metav1.Duration{Duration: closeAt.Sub(s.windowStart)}
	}); err != nil {
		return false, err
	}
	want := s.sc.Clusters * s.sc.Bundles
	p := s.tr.startTestPhase(closeAt, want, nil, func(_ string, bd *fleet.BundleDeployment) (bool, bool) {
		return bd.Spec.OffSchedule, bd.Spec.OffSchedule
	})
	sleepCtx(ctx, time.Until(closeAt))
	s.mark("before-hold")
	s.logf("window closed: holding %d BundleDeployments", want)
	s.prof.during(ctx, "hold", s.res)
	ok := wait(ctx, p.complete, s.timeout, s.children...)
	end := time.Now()
	held, _ := s.tr.snapshot(p)
	r.Hold = timingOf(held, want, ok)
	s.mark("hold")
	s.logf("hold: %d of %d off schedule, total %.1fs", r.Hold.Count, want, r.Hold.TotalSeconds)
	if !ok {
		s.res.problem("after %s only %d of %d BundleDeployments were off schedule after the window closed", s.timeout, r.Hold.Count, want)
		return false, nil
	}
	r.HoldRequests, _ = s.requests(closeAt, end) // an extra figure; the run stands without it
	r.HoldBundleDeploymentWrites = bundleDeploymentWrites(r.HoldRequests)
	return true, nil
}

// change changes the first bundle while the window is closed: the manager
// writes the new deploymentID, still off schedule, and no agent applies it.
func (s *scheduleRun) change(ctx context.Context, r *ScheduleResult) (bool, error) {
	name := bundlePfx + "0"
	ofBundle := bundleFilter(name)
	s.heldFrom = s.tr.deploymentIDs(ofBundle)
	s.logf("changing bundle %s while the window is closed", name)
	p := s.tr.startTestPhase(time.Now(), s.sc.Clusters, ofBundle, func(k string, bd *fleet.BundleDeployment) (bool, bool) {
		moved := bd.Spec.DeploymentID != s.heldFrom[k]
		return moved, moved && bd.Spec.OffSchedule
	})
	if err := changeBundle(ctx, s.c, name, s.sc.ResourcesPerBundle); err != nil {
		return false, err
	}
	ok := wait(ctx, p.complete, s.timeout, s.children...)
	written, _ := s.tr.snapshot(p)
	r.HeldChange = timingOf(written, s.sc.Clusters, ok)
	s.logf("held change: %d of %d written, total %.1fs", r.HeldChange.Count, s.sc.Clusters, r.HeldChange.TotalSeconds)
	if !ok {
		s.mark("held-change")
		s.res.problem("after %s only %d of %d BundleDeployments had the change made while the window was closed", s.timeout, r.HeldChange.Count, s.sc.Clusters)
		return false, nil
	}
	// The release must not share the API server with the held change's
	// roll-up, as on a real fleet where a window opens long after.
	waited, err := settleUntil(ctx, s.c, s.timeout, func(b string, sum fleet.BundleSummary) bool {
		if b == name {
			return sum.WaitApplied == s.sc.Clusters && sum.DesiredReady == s.sc.Clusters
		}
		return sum.Ready == s.sc.Clusters && sum.DesiredReady == s.sc.Clusters
	}, func(_ string, sum fleet.BundleSummary) bool {
		return sum.Ready == s.sc.Bundles-1 && sum.WaitApplied == 1 && sum.DesiredReady == s.sc.Bundles
	})
	r.HeldSettleSeconds = waited.Seconds()
	s.mark("held-change")
	if err != nil {
		s.res.problem("the held change was not rolled up after %s (%v); the release shares the API server with it", waited.Round(time.Second), err)
	}
	r.AppliedWhileHeld = s.tr.count(func(k string, bd *fleet.BundleDeployment) bool {
		return ofBundle(k, bd) && bd.Spec.DeploymentID != s.heldFrom[k] && bd.Status.AppliedDeploymentID == bd.Spec.DeploymentID
	})
	if r.AppliedWhileHeld > 0 {
		s.res.problem("%d agents applied the change while the window was closed", r.AppliedWhileHeld)
	}
	return true, nil
}

// release moves the next start to a moment just ahead and times the
// opening: every BundleDeployment must lose spec.offSchedule and be
// Ready, the changed bundle's with its new deploymentID.
func (s *scheduleRun) release(ctx context.Context, r *ScheduleResult) (bool, error) {
	s.prof.wait() // the hold's profiles: a process takes one CPU profile at a time
	openAt := time.Now().UTC().Truncate(time.Second).Add(flipLead)
	if err := s.patchSpec(ctx, func(spec *fleet.ScheduleSpec) {
		spec.Schedule, spec.Duration = dailyAt(openAt), metav1.Duration{Duration: windowLength}
	}); err != nil {
		return false, err
	}
	want := s.sc.Clusters * s.sc.Bundles
	p := s.tr.startTestPhase(openAt, want, nil, func(k string, bd *fleet.BundleDeployment) (bool, bool) {
		released := !bd.Spec.OffSchedule
		if from, changed := s.heldFrom[k]; changed && bd.Spec.DeploymentID == from {
			return released, false
		}
		return released, released && bdReady(bd)
	})
	sleepCtx(ctx, time.Until(openAt))
	s.mark("before-release")
	s.logf("window open: releasing %d BundleDeployments", want)
	s.prof.during(ctx, "release", s.res)
	ok := wait(ctx, p.complete, s.timeout, s.children...)
	end := time.Now()
	ready, written := s.tr.snapshot(p)
	r.Release, r.ReleaseWritten = timingOf(ready, want, ok), timingOf(written, want, len(written) >= want)
	s.mark("release")
	s.logf("release: %d of %d Ready, total %.1fs", r.Release.Count, want, r.Release.TotalSeconds)
	if !ok {
		s.res.problem("after %s only %d of %d BundleDeployments were Ready after the window opened (%d released)", s.timeout, r.Release.Count, want, len(written))
		return false, nil
	}
	r.ReleaseRequests, _ = s.requests(openAt, end) // likewise
	r.ReleaseBundleDeploymentWrites = bundleDeploymentWrites(r.ReleaseRequests)
	return true, nil
}

// patchSpec changes the Schedule's spec with a merge patch: the
// controller's status writes cannot make it conflict.
func (s *scheduleRun) patchSpec(ctx context.Context, change func(*fleet.ScheduleSpec)) error {
	sch := &fleet.Schedule{}
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: workspace, Name: scheduleName}, sch); err != nil {
		return fmt.Errorf("reading the Schedule: %w", err)
	}
	orig := sch.DeepCopy()
	change(&sch.Spec)
	if err := s.c.Patch(ctx, sch, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("changing the Schedule: %w", err)
	}
	return nil
}

// waitClusters waits until every simulated Cluster passes ok.
func (s *scheduleRun) waitClusters(ctx context.Context, ok func(*fleet.Cluster) bool) (time.Duration, error) {
	start := time.Now()
	passed := 0
	err := kwait.PollUntilContextTimeout(ctx, time.Second, s.timeout, true, func(ctx context.Context) (bool, error) {
		n, cont := 0, ""
		for {
			cl := &fleet.ClusterList{}
			if err := s.c.List(ctx, cl, client.InNamespace(workspace), client.MatchingLabels{targetLabel: "true"},
				client.Limit(1000), client.Continue(cont)); err != nil {
				return false, nil // retried like a cluster not yet flagged
			}
			for i := range cl.Items {
				if ok(&cl.Items[i]) {
					n++
				}
			}
			if cont = cl.Continue; cont == "" {
				break
			}
		}
		passed = n
		return n >= s.sc.Clusters, nil
	})
	if err != nil {
		return time.Since(start), fmt.Errorf("%d of %d clusters: %w", passed, s.sc.Clusters, err)
	}
	return time.Since(start), nil
}

// scheduleState describes the Schedule's status for a problem report.
func (s *scheduleRun) scheduleState(ctx context.Context) string {
	sch := &fleet.Schedule{}
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: workspace, Name: scheduleName}, sch); err != nil {
		return err.Error()
	}
	var conds []string
	for _, c := range sch.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message))
	}
	return fmt.Sprintf("active=%v matching %d clusters, conditions [%s]", sch.Status.Active, len(sch.Status.MatchingClusters), strings.Join(conds, "; "))
}

// dailyAt is a Quartz cron expression (with seconds) that fires every day
// at t's time of day, in UTC.
func dailyAt(t time.Time) string {
	t = t.UTC()
	return fmt.Sprintf("%d %d %d * * ?", t.Second(), t.Minute(), t.Hour())
}

// bundleFilter accepts the BundleDeployments of one bundle.
func bundleFilter(name string) func(string, runtime.Object) bool {
	return func(_ string, obj runtime.Object) bool {
		bd, _ := obj.(*fleet.BundleDeployment)
		return bd != nil && bd.Labels[fleet.BundleLabel] == name
	}
}

// bundleDeploymentWrites counts the manager's writes of BundleDeployments
// themselves (not of their status) among r's.
func bundleDeploymentWrites(r *Requests) int {
	if r == nil {
		return 0
	}
	n := 0
	for k, v := range r.ManagerWrites {
		if _, res, _ := strings.Cut(k, " "); res == "bundledeployments" {
			n += v
		}
	}
	return n
}
