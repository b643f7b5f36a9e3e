package bundle_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/bundle"
	"github.com/fleetgo/fleet/internal/manifest"
)

// name70 is a valid object name (a DNS-1123 subdomain) of 70 characters:
// longer than a label value may be (63).
func name70(prefix string) string {
	return prefix + strings.Repeat("x", 70-len(prefix))
}

// quietWindow is how long a Bundle that waits for a change is watched for
// reconciles it should not get.
const quietWindow = 8 * time.Second

// TestBundleNameTooLong: a Bundle whose name cannot be the value of the
// bundle-name label of its BundleDeployments (over 63 characters, e.g.
// created with kubectl) is refused whole: Ready=False and Stalled with
// reason InvalidName and a message naming the limit and the fix, one
// Warning Event, nothing written for it (no BundleDeployment, no Content)
// and no retry loop; a new generation is refused the same way without a
// second Event.
func TestBundleNameTooLong(t *testing.T) {
	ctx := context.Background()
	ws := "ws-longbundle"
	createNamespace(t, ctx, ws, nil)
	c := newCluster(t, ctx, ws, "lb1", map[string]string{"lb": "yes"}, time.Second)

	name := name70("long-bundle-")
	res := resources("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: long-bundle\n")
	b := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name},
		Spec: fleet.BundleSpec{
			Resources: res,
			Targets:   []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"lb": "yes"}}}},
		},
	}
	must(t, env.Client.Create(ctx, b))
	key := client.ObjectKeyFromObject(b)

	wantRefused := func() error {
		cur := &fleet.Bundle{}
		if err := env.Client.Get(ctx, key, cur); err != nil {
			return err
		}
		ready := meta.FindStatusCondition(cur.Status.Conditions, fleet.ConditionReady)
		stalled := meta.FindStatusCondition(cur.Status.Conditions, fleet.ConditionStalled)
		if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != bundle.ReasonInvalidName || ready.ObservedGeneration != cur.Generation {
			return fmt.Errorf("ready %+v", ready)
		}
		if stalled == nil || stalled.Status != metav1.ConditionTrue || stalled.Reason != bundle.ReasonInvalidName || stalled.ObservedGeneration != cur.Generation {
			return fmt.Errorf("stalled %+v", stalled)
		}
		for _, want := range []string{"70 characters", "at most 63", fleet.BundleLabel, "shorter name"} {
			if !strings.Contains(ready.Message, want) {
				return fmt.Errorf("message %q does not say %q", ready.Message, want)
			}
		}
		if cur.Status.Display.State != "Error" {
			return fmt.Errorf("display state %q", cur.Status.Display.State)
		}
		return nil
	}
	eventually(t, 60*time.Second, wantRefused)

	// Nothing half done: no deployment and no Content of its resources.
	bds := &fleet.BundleDeploymentList{}
	must(t, env.Client.List(ctx, bds, client.InNamespace(c.Status.Namespace)))
	if len(bds.Items) != 0 {
		t.Errorf("%d BundleDeployments in the cluster namespace", len(bds.Items))
	}
	m, err := manifest.New(res)
	must(t, err)
	sum, err := m.SHA256()
	must(t, err)
	if err := env.Client.Get(ctx, client.ObjectKey{Name: manifest.IDFromSHA(sum)}, &fleet.Content{}); !apierrors.IsNotFound(err) {
		t.Errorf("Content of the refused bundle: %v", err)
	}

	// Refused once, not retried: no reconciles while nothing changes.
	before := bundle.Reconciles(key)
	consistently(t, quietWindow, wantRefused)
	if n := bundle.Reconciles(key) - before; n > 1 {
		t.Errorf("%d reconciles of the refused bundle in %s without any change: a retry loop", n, quietWindow)
	}

	// A new generation is refused the same way, and no second Event.
	update(t, ctx, b, false, func() {
		b.Spec.Resources = resources("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: long-bundle-2\n")
	})
	eventually(t, 60*time.Second, wantRefused)
	eventually(t, 30*time.Second, func() error {
		evs := eventsFor(ctx, ws, name, bundle.ReasonInvalidName)
		if len(evs) != 1 {
			return fmt.Errorf("%d %s events", len(evs), bundle.ReasonInvalidName)
		}
		e := evs[0]
		if e.Type != "Warning" || !strings.Contains(e.Note, "at most 63") {
			return fmt.Errorf("event %s %q", e.Type, e.Note)
		}
		if e.Series != nil && e.Series.Count > 1 {
			return fmt.Errorf("event recorded %d times", e.Series.Count)
		}
		return nil
	})

	// Deleting it works as for any Bundle (nothing to clean up).
	must(t, env.Client.Delete(ctx, b))
	eventually(t, 60*time.Second, func() error {
		if err := env.Client.Get(ctx, key, &fleet.Bundle{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("bundle still there: %v", err)
		}
		return nil
	})
}

// TestClusterNameTooLongNotTargeted: a Cluster whose name cannot be the
// value of the cluster label of a BundleDeployment (over 63 characters;
// created by hand, its status.namespace set as an older manager did) is
// not a target: a Bundle matching it and another cluster deploys to the
// other one, becomes Ready there with its generation observed, is not
// retried in a loop, and nothing is written for the long-named cluster.
// The Cluster's own status says why (the registration area, see
// internal/registration TestClusterNameTooLong).
func TestClusterNameTooLongNotTargeted(t *testing.T) {
	ctx := context.Background()
	ws := "ws-longcluster"
	createNamespace(t, ctx, ws, nil)
	short := newCluster(t, ctx, ws, "lc-short", map[string]string{"lc": "yes"}, time.Second)
	long := newCluster(t, ctx, ws, name70("lc-long-"), map[string]string{"lc": "yes"}, time.Second)

	b := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "lc-app"},
		Spec: fleet.BundleSpec{
			Resources: resources("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: lc\n"),
			Targets:   []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"lc": "yes"}}}},
		},
	}
	must(t, env.Client.Create(ctx, b))
	key := client.ObjectKeyFromObject(b)

	ready := func() error {
		if err := playAgents(ctx, ws, b.Name, nil, nil); err != nil {
			return err
		}
		bds, err := bundleDeployments(ctx, ws, b.Name)
		if err != nil {
			return err
		}
		if got := sortedKeys(bds); len(got) != 1 || got[0] != short.Name {
			return fmt.Errorf("deployments on %v", got)
		}
		cur := &fleet.Bundle{}
		if err := env.Client.Get(ctx, key, cur); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(cur.Status.Conditions, fleet.ConditionReady)
		if cond == nil || cond.Status != metav1.ConditionTrue || cur.Status.ObservedGeneration != cur.Generation {
			return fmt.Errorf("generation %d/%d, conditions %+v", cur.Status.ObservedGeneration, cur.Generation, cur.Status.Conditions)
		}
		if cur.Status.Summary.DesiredReady != 1 || cur.Status.Summary.Ready != 1 {
			return fmt.Errorf("summary %d/%d", cur.Status.Summary.Ready, cur.Status.Summary.DesiredReady)
		}
		return nil
	}
	eventually(t, 60*time.Second, ready)
	deployed, err := bundleDeployments(ctx, ws, b.Name)
	must(t, err)
	uid := deployed[short.Name].UID

	before := bundle.Reconciles(key)
	consistently(t, quietWindow, ready)
	if n := bundle.Reconciles(key) - before; n > 1 {
		t.Errorf("%d reconciles in %s without any change: a retry loop", n, quietWindow)
	}
	bds := &fleet.BundleDeploymentList{}
	must(t, env.Client.List(ctx, bds, client.InNamespace(long.Status.Namespace)))
	if len(bds.Items) != 0 {
		t.Errorf("%d BundleDeployments in the long-named cluster's namespace", len(bds.Items))
	}

	// The long-named cluster changing (a new label) leaves the deployment
	// on the other cluster as it is.
	update(t, ctx, long, false, func() { long.Labels["touched"] = "yes" })
	consistently(t, 3*time.Second, ready)
	deployed, err = bundleDeployments(ctx, ws, b.Name)
	must(t, err)
	if bd := deployed[short.Name]; bd == nil || bd.UID != uid {
		t.Errorf("the deployment on %s was replaced or deleted", short.Name)
	}
}

// eventsFor lists the Events of reason about the object ns/name.
func eventsFor(ctx context.Context, ns, name, reason string) []eventsv1.Event {
	var list eventsv1.EventList
	if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}
