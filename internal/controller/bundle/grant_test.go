package bundle_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/content"
	"github.com/fleetgo/fleet/internal/manifest"
)

// agentWatchClient is a client with an agent-like credential for a cluster
// namespace: it may watch that namespace's BundleDeployments and, through
// fleet-content-<ns> as registration binds it, get Contents.
func agentWatchClient(t *testing.T, ctx context.Context, clusterNS string) client.WithWatch {
	t.Helper()
	return agentCredential(t, ctx, clusterNS, "agent-watch",
		rbacv1.PolicyRule{APIGroups: []string{fleet.GroupVersion.Group}, Resources: []string{"bundledeployments"}, Verbs: []string{"get", "list", "watch"}})
}

// observer watches one cluster namespace as its agent would and, the moment
// a BundleDeployment shows a new deploymentID, GETs its Content with the
// agent's credential, recording any failure.
type observer struct {
	mu       sync.Mutex
	seen     map[string]bool // deploymentIDs observed
	failures []string
}

func (o *observer) run(ctx context.Context, c client.WithWatch, ns string) {
	for ctx.Err() == nil {
		w, err := c.Watch(ctx, &fleet.BundleDeploymentList{}, client.InNamespace(ns))
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			bd, ok := ev.Object.(*fleet.BundleDeployment)
			if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) || bd.Spec.DeploymentID == "" {
				continue
			}
			o.mu.Lock()
			isNew := !o.seen[bd.Spec.DeploymentID]
			o.seen[bd.Spec.DeploymentID] = true
			o.mu.Unlock()
			if !isNew {
				continue
			}
			id := manifest.ManifestIDOf(bd.Spec.DeploymentID)
			if err := c.Get(ctx, types.NamespacedName{Name: id}, &fleet.Content{}); err != nil && ctx.Err() == nil {
				o.mu.Lock()
				o.failures = append(o.failures, fmt.Sprintf("%s: GET content %s right after seeing deployment %s: %v", ns, id, bd.Spec.DeploymentID, err))
				o.mu.Unlock()
			}
		}
		w.Stop()
	}
}

func (o *observer) saw(contentID string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for id := range o.seen {
		if manifest.ManifestIDOf(id) == contentID {
			return true
		}
	}
	return false
}

// TestGrantBeforePublish fails if an agent can observe a BundleDeployment
// pointing at a Content its credential cannot read yet: over several
// clusters and rollouts, a watch with the agent's credential GETs the
// Content the instant it sees each new deploymentID. Afterwards each role
// is pruned down to the Content in use.
func TestGrantBeforePublish(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ws := "ws-grant"
	createNamespace(t, ctx, ws, nil)
	const clusters, rollouts = 4, 3
	obs := make([]*observer, clusters)
	var nss []string
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range clusters {
		c := newCluster(t, ctx, ws, fmt.Sprintf("g%d", i), map[string]string{"grant": "yes"}, time.Second)
		nss = append(nss, c.Status.Namespace)
		obs[i] = &observer{seen: map[string]bool{}}
		ac := agentWatchClient(t, ctx, c.Status.Namespace)
		wg.Add(1)
		go func() {
			defer wg.Done()
			obs[i].run(ctx, ac, c.Status.Namespace)
		}()
	}
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "granted"}}
	b.Spec.Targets = []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"grant": "yes"}}}}
	var id string
	for rev := range rollouts {
		res := resources(fmt.Sprintf("kind: ConfigMap\nmetadata:\n  name: granted\ndata:\n  rev: %q\n", fmt.Sprint(rev)))
		id = manifestID(t, res)
		if rev == 0 {
			b.Spec.Resources = res
			must(t, env.Client.Create(ctx, b))
		} else {
			update(t, ctx, b, false, func() { b.Spec.Resources = res })
		}
		eventually(t, 60*time.Second, func() error {
			for i, o := range obs {
				if !o.saw(id) {
					return fmt.Errorf("cluster %d has not seen a deployment of content %s", i, id)
				}
			}
			return nil
		})
		// Let the agents report, as the rollout strategy waits for them.
		eventually(t, 60*time.Second, func() error { return playAgents(ctx, ws, "granted", nil, nil) })
	}
	for _, o := range obs {
		o.mu.Lock()
		for _, f := range o.failures {
			t.Error(f)
		}
		o.mu.Unlock()
	}
	// Lazily, each role ends up granting only the Content in use.
	eventually(t, 60*time.Second, func() error {
		for _, ns := range nss {
			role := &rbacv1.ClusterRole{}
			if err := env.Client.Get(ctx, types.NamespacedName{Name: content.RoleName(ns)}, role); err != nil {
				return err
			}
			if len(role.Rules) != 1 || fmt.Sprint(role.Rules[0].ResourceNames) != fmt.Sprint([]string{id}) {
				return fmt.Errorf("role %s grants %+v, want only %s", role.Name, role.Rules, id)
			}
		}
		return nil
	})
}

// TestDetargetedClusterLosesGrant: a cluster that stops matching a bundle's
// targets loses read access to its Content (within the grant grace); the
// cluster still targeted keeps it.
func TestDetargetedClusterLosesGrant(t *testing.T) {
	ctx := context.Background()
	ws := "ws-detarget"
	createNamespace(t, ctx, ws, nil)
	a := newCluster(t, ctx, ws, "a", map[string]string{"dt": "yes"}, time.Second)
	b := newCluster(t, ctx, ws, "b", map[string]string{"dt": "yes"}, time.Second)
	res := resources("kind: ConfigMap\nmetadata:\n  name: detarget\n")
	id := manifestID(t, res)
	bu := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "detarget"}}
	bu.Spec.Resources = res
	bu.Spec.Targets = []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"dt": "yes"}}}}
	must(t, env.Client.Create(ctx, bu))
	agentA, agentB := agentClient(t, ctx, a.Status.Namespace), agentClient(t, ctx, b.Status.Namespace)
	eventually(t, 60*time.Second, func() error {
		if err := agentA.Get(ctx, types.NamespacedName{Name: id}, &fleet.Content{}); err != nil {
			return fmt.Errorf("agent a: %w", err)
		}
		return agentB.Get(ctx, types.NamespacedName{Name: id}, &fleet.Content{})
	})

	update(t, ctx, b, false, func() { b.Labels["dt"] = "no" })
	eventually(t, 90*time.Second, func() error {
		bds, err := bundleDeployments(ctx, ws, "detarget")
		if err != nil {
			return err
		}
		if bds["b"] != nil {
			return fmt.Errorf("cluster b still has its deployment")
		}
		err = agentB.Get(ctx, types.NamespacedName{Name: id}, &fleet.Content{})
		if !apierrors.IsForbidden(err) {
			return fmt.Errorf("agent b reading the content of a bundle no longer targeting it: want 403, got %v", err)
		}
		return nil
	})
	if err := agentA.Get(ctx, types.NamespacedName{Name: id}, &fleet.Content{}); err != nil {
		t.Fatalf("agent a lost access to its content: %v", err)
	}
	role := &rbacv1.ClusterRole{}
	must(t, env.Client.Get(ctx, types.NamespacedName{Name: content.RoleName(b.Status.Namespace)}, role))
	if len(role.Rules) != 0 {
		t.Fatalf("role of b still grants %+v", role.Rules)
	}
}
