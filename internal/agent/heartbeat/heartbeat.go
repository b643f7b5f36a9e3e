// Package heartbeat reports the agent's check-in, its check-in interval and
// node counts on its Cluster upstream: status.agent and
// status.display.readyNodes/sampleNode,
// the parts the agent owns. Where the manager's content API takes
// check-ins (contentapi.ClusterStatusResource) it PUTs them there, in the
// cluster namespace, and the manager writes the Cluster; otherwise (Rancher
// Fleet's manager, or ours without the content API) it merge-patches the
// Cluster's status itself. It never reads the Cluster, so a fleet of agents
// adds no read load on the manager.
package heartbeat

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
)

// Options configure the heartbeat.
type Options struct {
	// Upstream writes the Cluster status; Downstream lists nodes.
	Upstream   client.Client
	Downstream client.Reader
	// Content, when set, is a client of the content API with the cluster's
	// credential: check-ins go there first (see Report).
	Content rest.Interface
	// Workspace and ClusterName name the Cluster upstream; ClusterNamespace
	// is the cluster namespace (where the agent's Role is).
	Workspace, ClusterName, ClusterNamespace string
	// AgentNamespace is reported as status.agent.namespace.
	AgentNamespace string
	// Interval between check-ins (default 15m), jittered by up to 10%.
	Interval time.Duration
	// FirstDelay is the wait before the first check-in (default 1s), plus
	// up to as much again at random: agents that start together (a fleet
	// restarted at once) do not check in at the same instant. Until the
	// first check-in the Cluster shows WaitCheckIn, so it stays short.
	FirstDelay time.Duration
	// OnRefused is called when the manager's API server rejects the
	// credential (401 from the API server itself, not only from the
	// content API; or 403 three times in a row): the agent then stops and
	// re-registers.
	OnRefused func(error)
	// Now is the clock (tests).
	Now func() time.Time
}

// Heartbeat is a manager.Runnable.
type Heartbeat struct {
	opts  Options
	route Route
}

// New returns a heartbeat; add it to the upstream manager.
func New(opts Options) *Heartbeat {
	if opts.Interval <= 0 {
		opts.Interval = 15 * time.Minute
	}
	if opts.FirstDelay == 0 {
		opts.FirstDelay = time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Heartbeat{opts: opts}
}

// NeedLeaderElection is false: the upstream manager runs no election.
func (h *Heartbeat) NeedLeaderElection() bool { return false }

// Start reports until ctx ends: first after FirstDelay (jittered), then
// every Interval; a failed report is retried with jittered exponential
// backoff (1s up to Interval).
func (h *Heartbeat) Start(ctx context.Context) error {
	l := log.FromContext(ctx).WithName("heartbeat")
	wait := jitter(h.opts.FirstDelay, 100)
	retry := time.Second
	forbidden := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		err := h.Report(ctx)
		switch {
		case err == nil:
			forbidden = 0
			retry = time.Second
			wait = jitter(h.opts.Interval, 10)
			continue
		case ctx.Err() != nil:
			return nil
		case apierrors.IsUnauthorized(err):
			forbidden = 3
		case apierrors.IsForbidden(err):
			forbidden++
		}
		if forbidden >= 3 && h.opts.OnRefused != nil {
			l.Info("manager refused the cluster credential", "error", err.Error())
			h.opts.OnRefused(err)
			return nil
		}
		l.Info("check-in failed, retrying", "error", err.Error(), "in", retry)
		wait = jitter(retry, 20)
		retry = min(retry*2, h.opts.Interval)
	}
}

// Report sends one check-in (see Route).
func (h *Heartbeat) Report(ctx context.Context) error {
	var nodes corev1.NodeList
	if err := h.opts.Downstream.List(ctx, &nodes); err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	report := Status(nodes.Items, h.opts.AgentNamespace, h.opts.Now())
	// The manager takes the cluster to be Offline after 3 × the longer of
	// this and its own interval: an agent installed with a longer interval
	// than the manager's would otherwise flip Offline between check-ins.
	report.Agent.CheckinInterval = &metav1.Duration{Duration: h.opts.Interval}
	var viaAPI func() error
	if h.opts.Content != nil {
		viaAPI = func() error {
			return Put(ctx, h.opts.Content, h.opts.Workspace, h.opts.ClusterNamespace, h.opts.ClusterName, report)
		}
	}
	return h.route.Send(ctx, viaAPI, func() error {
		patch, err := report.MergePatch()
		if err != nil {
			return err
		}
		cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: h.opts.Workspace, Name: h.opts.ClusterName}}
		return h.opts.Upstream.Status().Patch(ctx, cluster, client.RawPatch(types.MergePatchType, patch))
	})
}

// Route sends check-ins through the content API while it takes them, and
// as a patch of the Cluster's status once that has worked where the
// content API did not: a content API that answers 404 (not served: an
// older or Rancher Fleet manager) or 403 (a credential granted before the
// manager offered it) is tried no more once the patch succeeds. An agent
// registered for the content API has no grant to patch its Cluster, and
// an API server that has just restarted may answer 404 for the content
// API until its aggregation layer has caught up: then the patch is refused
// too, and the content API's answer is returned, to be retried like any
// failed check-in rather than counted as a refused credential, up to
// refusedBothLimit times in a row: after that the patch's refusal is
// returned, so that an agent whose manager stopped serving the content API
// for good ends up registering again (and gets the grant to patch).
//
// A 401 from the content API may be the API server's (the credential is
// refused) or the manager's, when it cannot authenticate the aggregation
// layer (its copy of a rotated request-header CA is stale, or an older
// manager has not loaded it yet) after the API server accepted the
// credential. So the patch is tried too, and only its 401, the API
// server's own, is returned as one; any other answer of the patch makes
// the check-in a failure to retry, never a refused credential, however
// often it happens, and the content API is asked again next time. Other
// errors (503: the manager is away) are returned as they are. Safe for
// concurrent use.
type Route struct {
	direct      atomic.Bool
	refusedBoth atomic.Int32
}

// refusedBothLimit is how many check-ins in a row may find both ways
// refused before the refusal counts against the credential; with the
// heartbeat's backoff (1 s doubling) that is about a minute.
const refusedBothLimit = 6

// Send sends one check-in with viaAPI (nil: no content API client) or
// patch.
func (r *Route) Send(ctx context.Context, viaAPI, patch func() error) error {
	var apiErr error
	if viaAPI != nil && !r.direct.Load() {
		apiErr = viaAPI()
		if !apierrors.IsNotFound(apiErr) && !apierrors.IsForbidden(apiErr) && !apierrors.IsUnauthorized(apiErr) {
			if apiErr == nil {
				r.refusedBoth.Store(0)
			}
			return apiErr
		}
	}
	err := patch()
	managerUnauthorized := apierrors.IsUnauthorized(apiErr)
	switch {
	case err == nil:
		r.refusedBoth.Store(0)
		if apiErr != nil && !managerUnauthorized && !r.direct.Swap(true) {
			log.FromContext(ctx).Info("the manager's content API does not take this cluster's check-ins; patching the Cluster instead", "reason", apiErr.Error())
		}
		return nil
	case managerUnauthorized && !apierrors.IsUnauthorized(err):
		// Not wrapped: neither answer may count as a refusal.
		return fmt.Errorf("the content API did not authenticate the check-in (%v), though the API server accepts the credential (patch: %v)", apiErr, err)
	case apiErr != nil && !managerUnauthorized && r.refusedBoth.Add(1) <= refusedBothLimit:
		return apiErr
	}
	return err
}

// Put sends report as the check-in of Cluster workspace/name, whose cluster
// namespace is clusterNS, through the content API client c.
func Put(ctx context.Context, c rest.Interface, workspace, clusterNS, name string, report contentapi.AgentReport) error {
	body, err := json.Marshal(contentapi.NewClusterStatus(workspace, clusterNS, name, report))
	if err != nil {
		return err
	}
	return c.Put().AbsPath(contentapi.ClusterStatusPath(clusterNS, name)).
		SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Error()
}

// Status is the part of the Cluster status the agent writes:
// status.agent and status.display.readyNodes/sampleNode. Node names are
// sorted; at most three of each kind are listed; the sample node is the
// first ready node, else the first one.
func Status(nodes []corev1.Node, agentNamespace string, now time.Time) contentapi.AgentReport {
	var ready, notReady []string
	for _, n := range nodes {
		if nodeReady(n) {
			ready = append(ready, n.Name)
		} else {
			notReady = append(notReady, n.Name)
		}
	}
	slices.Sort(ready)
	slices.Sort(notReady)
	sample := ""
	switch {
	case len(ready) > 0:
		sample = ready[0]
	case len(notReady) > 0:
		sample = notReady[0]
	}
	return contentapi.AgentReport{
		Agent: fleet.AgentStatus{
			LastSeen:          metav1.NewTime(now.Truncate(time.Second)),
			Namespace:         agentNamespace,
			ReadyNodes:        len(ready),
			NonReadyNodes:     len(notReady),
			ReadyNodeNames:    first(ready, 3),
			NonReadyNodeNames: first(notReady, 3),
		},
		Display: contentapi.AgentDisplay{
			ReadyNodes: fmt.Sprintf("%d/%d", len(ready), len(nodes)),
			SampleNode: sample,
		},
	}
}

func first(s []string, n int) []string {
	if len(s) == 0 {
		return nil
	}
	return s[:min(n, len(s))]
}

func nodeReady(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// jitter spreads d by up to pct percent.
func jitter(d time.Duration, pct int64) time.Duration {
	if d <= 0 {
		return d
	}
	return d + time.Duration(rand.Int64N(int64(d)*pct/100+1))
}
