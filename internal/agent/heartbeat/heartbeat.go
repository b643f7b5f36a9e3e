// Package heartbeat reports the agent's check-in and node counts on its
// Cluster upstream. It only ever PATCHes the Cluster's status (a merge patch
// of status.agent and status.display.readyNodes/sampleNode, the parts the
// agent owns); it never reads the Cluster, so a fleet of agents adds no read
// load on the manager.
package heartbeat

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// Options configure the heartbeat.
type Options struct {
	// Upstream writes the Cluster status; Downstream lists nodes.
	Upstream   client.Client
	Downstream client.Reader
	// Workspace and ClusterName name the Cluster upstream.
	Workspace, ClusterName string
	// AgentNamespace is reported as status.agent.namespace.
	AgentNamespace string
	// Interval between check-ins (default 15m), jittered by up to 10%.
	Interval time.Duration
	// FirstDelay is the wait before the first check-in (default 5s).
	FirstDelay time.Duration
	// OnRefused is called when the manager rejects the credential (401, or
	// 403 three times in a row): the agent then stops and re-registers.
	OnRefused func(error)
	// Now is the clock (tests).
	Now func() time.Time
}

// Heartbeat is a manager.Runnable.
type Heartbeat struct {
	opts Options
}

// New returns a heartbeat; add it to the upstream manager.
func New(opts Options) *Heartbeat {
	if opts.Interval <= 0 {
		opts.Interval = 15 * time.Minute
	}
	if opts.FirstDelay == 0 {
		opts.FirstDelay = 5 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Heartbeat{opts: opts}
}

// NeedLeaderElection is false: the upstream manager runs no election.
func (h *Heartbeat) NeedLeaderElection() bool { return false }

// Start reports until ctx ends: first after FirstDelay, then every Interval;
// a failed report is retried with jittered exponential backoff (1s up to
// Interval).
func (h *Heartbeat) Start(ctx context.Context) error {
	l := log.FromContext(ctx).WithName("heartbeat")
	wait := h.opts.FirstDelay
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

// Report sends one check-in.
func (h *Heartbeat) Report(ctx context.Context) error {
	var nodes corev1.NodeList
	if err := h.opts.Downstream.List(ctx, &nodes); err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	patch, err := json.Marshal(map[string]any{"status": Status(nodes.Items, h.opts.AgentNamespace, h.opts.Now())})
	if err != nil {
		return err
	}
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: h.opts.Workspace, Name: h.opts.ClusterName}}
	return h.opts.Upstream.Status().Patch(ctx, cluster, client.RawPatch(types.MergePatchType, patch))
}

// Status is the part of the Cluster status the agent writes, as a merge
// patch: status.agent and status.display.readyNodes/sampleNode. Node names
// are sorted; at most three of each kind are listed; the sample node is the
// first ready node, else the first one.
func Status(nodes []corev1.Node, agentNamespace string, now time.Time) map[string]any {
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
	return map[string]any{
		"agent": map[string]any{
			"lastSeen":          metav1.NewTime(now).UTC().Format(time.RFC3339),
			"namespace":         agentNamespace,
			"readyNodes":        len(ready),
			"nonReadyNodes":     len(notReady),
			"readyNodeNames":    first(ready, 3),
			"nonReadyNodeNames": first(notReady, 3),
		},
		"display": map[string]any{
			"readyNodes": fmt.Sprintf("%d/%d", len(ready), len(nodes)),
			"sampleNode": sample,
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
