package harness

import (
	"context"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/summary"
)

// watchAll lists (in pages) and watches every object of a fleet resource,
// calling handle for each object seen, until ctx ends.
func watchAll(ctx context.Context, rc rest.Interface, resource string, newList func() runtime.Object,
	handle func(obj runtime.Object, deleted bool)) {
	for ctx.Err() == nil {
		rv, cont := "", ""
		for {
			list := newList()
			err := rc.Get().Resource(resource).VersionedParams(&metav1.ListOptions{Limit: 1000, Continue: cont},
				metav1.ParameterCodec).Do(ctx).Into(list)
			if err != nil {
				rv = ""
				break
			}
			items, _ := meta.ExtractList(list)
			for _, it := range items {
				handle(it, false)
			}
			lm, _ := meta.ListAccessor(list)
			rv, cont = lm.GetResourceVersion(), lm.GetContinue()
			if cont == "" {
				break
			}
		}
		if rv == "" {
			sleepCtx(ctx, time.Second)
			continue
		}
		for ctx.Err() == nil {
			w, err := rc.Get().Resource(resource).VersionedParams(&metav1.ListOptions{Watch: true, ResourceVersion: rv,
				AllowWatchBookmarks: true}, metav1.ParameterCodec).Watch(ctx)
			if err != nil {
				break
			}
			gone := false
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					err := apierrors.FromObject(ev.Object)
					gone = apierrors.IsGone(err) || apierrors.IsResourceExpired(err)
					break
				}
				if m, err := meta.Accessor(ev.Object); err == nil {
					rv = m.GetResourceVersion()
				}
				if ev.Type != watch.Bookmark {
					handle(ev.Object, ev.Type == watch.Deleted)
				}
			}
			w.Stop()
			if gone {
				break
			}
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// phase waits for a number of objects to reach a state after a start
// time, recording when each did.
type phase struct {
	start time.Time
	want  int
	done  map[string]time.Time
	// written records when the manager wrote each BundleDeployment (first
	// seen with a new deploymentID), to split the time between manager
	// and agents.
	written map[string]time.Time
	filter  func(key string, obj runtime.Object) bool
	// baseline holds, for a change, the deploymentID of each object at the
	// start: an object counts only once it is Ready with another one.
	baseline map[string]string
	// test, when set, replaces the deploymentID and Ready rules above:
	// it says whether an object accepted by filter counts as written by
	// the manager, and whether it is done (a Schedule's flips, where
	// done is a spec flag rather than a new deploymentID).
	test     func(key string, bd *fleet.BundleDeployment) (written, done bool)
	complete chan struct{}
}

// durations returns the times from start to each object's done.
func (p *phase) durations() []time.Duration { return since(p.start, p.done) }

func since(start time.Time, m map[string]time.Time) []time.Duration {
	out := make([]time.Duration, 0, len(m))
	for _, t := range m {
		out = append(out, t.Sub(start))
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// tracker follows BundleDeployments and Clusters of the upstream cluster.
type tracker struct {
	mu       sync.Mutex
	bds      map[string]*fleet.BundleDeployment // only spec.deploymentID and status kept
	clusters map[string]bool                    // key -> has checked in
	bdPhase  *phase
	clPhase  *phase
	// realAgentNS is the cluster namespace of the real fleet-agent.
	realAgentNS string
}

func newTracker() *tracker {
	return &tracker{bds: map[string]*fleet.BundleDeployment{}, clusters: map[string]bool{}}
}

func key(m metav1.Object) string { return m.GetNamespace() + "/" + m.GetName() }

// bdReady is the manager's own definition of a Ready BundleDeployment.
func bdReady(bd *fleet.BundleDeployment) bool { return summary.DeploymentState(bd) == fleet.Ready }

func (t *tracker) onBD(obj runtime.Object, deleted bool) {
	bd, ok := obj.(*fleet.BundleDeployment)
	if !ok {
		return
	}
	k := key(bd)
	t.mu.Lock()
	defer t.mu.Unlock()
	if deleted {
		delete(t.bds, k)
		return
	}
	slim := &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Labels: bd.Labels}, Spec: fleet.BundleDeploymentSpec{
		DeploymentID: bd.Spec.DeploymentID, StagedDeploymentID: bd.Spec.StagedDeploymentID, OffSchedule: bd.Spec.OffSchedule}, Status: fleet.BundleDeploymentStatus{
		AppliedDeploymentID: bd.Status.AppliedDeploymentID, Ready: bd.Status.Ready, NonModified: bd.Status.NonModified,
		Conditions: bd.Status.Conditions}}
	t.bds[k] = slim
	p := t.bdPhase
	if p == nil {
		return
	}
	if _, seen := p.done[k]; seen {
		return
	}
	if p.filter != nil && !p.filter(k, bd) {
		return
	}
	if p.test != nil {
		p.record(k, bd)
		return
	}
	if base, ok := p.baseline[k]; ok && base == bd.Spec.DeploymentID {
		return
	}
	if _, ok := p.written[k]; !ok {
		p.written[k] = time.Now()
	}
	if !bdReady(bd) {
		return
	}
	p.done[k] = time.Now()
	if len(p.done) == p.want {
		close(p.complete)
	}
}

// record applies a phase's test to one object; the caller holds the lock.
func (p *phase) record(k string, bd *fleet.BundleDeployment) {
	written, done := p.test(k, bd)
	if _, ok := p.written[k]; !ok && written {
		p.written[k] = time.Now()
	}
	if !done {
		return
	}
	p.done[k] = time.Now()
	if len(p.done) == p.want {
		close(p.complete)
	}
}

func (t *tracker) onCluster(obj runtime.Object, deleted bool) {
	c, ok := obj.(*fleet.Cluster)
	if !ok || deleted {
		return
	}
	in := c.Status.Agent.LastSeen.Time != (time.Time{}) && c.Status.Namespace != ""
	k := key(c)
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.Labels[realAgentLabel] == "true" && c.Status.Namespace != "" {
		t.realAgentNS = c.Status.Namespace
	}
	t.clusters[k] = in
	p := t.clPhase
	if p == nil || !in {
		return
	}
	if _, seen := p.done[k]; seen {
		return
	}
	p.done[k] = time.Now()
	if len(p.done) == p.want {
		close(p.complete)
	}
}

// startBDPhase begins waiting for want BundleDeployments accepted by
// filter to be Ready; with change, each must be Ready with a deploymentID
// other than the one it has now. Objects already done count at once.
func (t *tracker) startBDPhase(want int, change bool, filter func(string, runtime.Object) bool) *phase {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := &phase{start: time.Now(), want: want, done: map[string]time.Time{}, filter: filter,
		baseline: map[string]string{}, written: map[string]time.Time{}, complete: make(chan struct{})}
	for k, bd := range t.bds {
		if filter != nil && !filter(k, bd) {
			continue
		}
		if change {
			p.baseline[k] = bd.Spec.DeploymentID
		} else if bdReady(bd) {
			p.done[k] = p.start
		}
	}
	if len(p.done) >= want {
		close(p.complete)
	}
	t.bdPhase = p
	return p
}

// startTestPhase begins waiting for want BundleDeployments accepted by
// filter to pass test, timed from start (which may be a moment still to
// come: a Schedule's window opening or closing). Objects that pass at
// once count as done at start.
func (t *tracker) startTestPhase(start time.Time, want int, filter func(string, runtime.Object) bool,
	test func(string, *fleet.BundleDeployment) (bool, bool)) *phase {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := &phase{start: start, want: want, done: map[string]time.Time{}, filter: filter, test: test,
		written: map[string]time.Time{}, complete: make(chan struct{})}
	for k, bd := range t.bds {
		if filter != nil && !filter(k, bd) {
			continue
		}
		if written, done := test(k, bd); done {
			p.done[k] = start
		} else if written {
			p.written[k] = start
		}
	}
	if len(p.done) >= want {
		close(p.complete)
	}
	t.bdPhase = p
	return p
}

// deploymentIDs returns the deploymentID of each BundleDeployment that
// filter accepts.
func (t *tracker) deploymentIDs(filter func(string, runtime.Object) bool) map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]string{}
	for k, bd := range t.bds {
		if filter == nil || filter(k, bd) {
			out[k] = bd.Spec.DeploymentID
		}
	}
	return out
}

// count returns how many BundleDeployments pred accepts.
func (t *tracker) count(pred func(string, *fleet.BundleDeployment) bool) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for k, bd := range t.bds {
		if pred(k, bd) {
			n++
		}
	}
	return n
}

func (t *tracker) startClusterPhase(want int) *phase {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := &phase{start: time.Now(), want: want, done: map[string]time.Time{}, complete: make(chan struct{})}
	t.clPhase = p
	return p
}

// counts returns how many BundleDeployments exist and are Ready.
func (t *tracker) counts() (total, ready int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, bd := range t.bds {
		total++
		if bdReady(bd) {
			ready++
		}
	}
	return total, ready
}

// snapshot copies a phase's results under the lock: the times to Ready
// and the times to the manager's write.
func (t *tracker) snapshot(p *phase) (ready, written []time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return p.durations(), since(p.start, p.written)
}

// checkedIn counts the Clusters whose agent has checked in.
func (t *tracker) checkedIn() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, in := range t.clusters {
		if in {
			n++
		}
	}
	return n
}

func (t *tracker) realAgentNamespace() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.realAgentNS
}
