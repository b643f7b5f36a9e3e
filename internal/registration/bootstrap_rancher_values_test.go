package registration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/registration"
	"github.com/fleetgo/fleet/internal/testenv"
)

// gitRepoFinalizer is the gitops controller's finalizer, which does not
// run in this package: tests add it as that controller would.
const gitRepoFinalizer = "fleet.cattle.io/gitrepo-finalizer"

// newBootstrapNamespace creates namespace ns for one test's bootstrap.
func newBootstrapNamespace(t *testing.T, ns string) {
	t.Helper()
	if err := up.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
}

// TestBootstrapRepoEmptied: emptying bootstrap.repo deletes GitRepo
// "bootstrap" the bootstrap applied, as Rancher Fleet's apply set does,
// through the normal deletion (the GitRepo's finalizer holds it until
// its Bundles are gone); a GitRepo "bootstrap" a user made is kept.
func TestBootstrapRepoEmptied(t *testing.T) {
	ctx := context.Background()
	c := up.Client
	start := func(ns string, repo registration.BootstrapRepo) {
		t.Helper()
		if err := registration.EnsureLocalObjects(ctx, c, registration.Options{BootstrapNamespace: ns, BootstrapRepo: repo}); err != nil {
			t.Fatalf("bootstrap: %v", err)
		}
	}

	t.Run("applied by the bootstrap: deleted", func(t *testing.T) {
		ns := "bootstrap-repo-emptied"
		newBootstrapNamespace(t, ns)
		start(ns, registration.BootstrapRepo{Repo: "https://example.com/fleet.git"})
		key := client.ObjectKey{Namespace: ns, Name: "bootstrap"}
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			g := &fleet.GitRepo{}
			if err := c.Get(ctx, key, g); err != nil {
				return err
			}
			controllerutil.AddFinalizer(g, gitRepoFinalizer)
			return c.Update(ctx, g, client.FieldOwner("fleet-gitops"))
		}); err != nil {
			t.Fatal(err)
		}

		start(ns, registration.BootstrapRepo{})
		g := &fleet.GitRepo{}
		if err := c.Get(ctx, key, g); err != nil {
			t.Fatalf("GitRepo bootstrap: %v (want it held by its finalizer)", err)
		}
		if g.DeletionTimestamp.IsZero() {
			t.Fatal("GitRepo bootstrap not deleted after bootstrap.repo was emptied")
		}
		// A start while it is being deleted changes nothing.
		start(ns, registration.BootstrapRepo{})

		// The gitops controller removes its finalizer once the Bundles
		// are gone: the GitRepo is gone.
		controllerutil.RemoveFinalizer(g, gitRepoFinalizer)
		if err := c.Update(ctx, g); err != nil {
			t.Fatal(err)
		}
		eventually(t, "GitRepo bootstrap gone", func() error {
			if err := c.Get(ctx, key, &fleet.GitRepo{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("err = %v, want NotFound", err)
			}
			return nil
		})
	})

	t.Run("applied by an earlier bootstrap, without the marker: kept", func(t *testing.T) {
		ns := "bootstrap-repo-earlier"
		newBootstrapNamespace(t, ns)
		earlier := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": fleet.GroupVersion.String(), "kind": "GitRepo",
			"metadata": map[string]any{"name": "bootstrap", "namespace": ns},
			"spec":     map[string]any{"repo": "https://example.com/fleet.git", "branch": "master"},
		}}
		if err := c.Patch(ctx, earlier, client.Apply, client.FieldOwner("fleet-bootstrap")); err != nil {
			t.Fatal(err)
		}
		start(ns, registration.BootstrapRepo{})
		g := &fleet.GitRepo{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "bootstrap"}, g); err != nil {
			t.Fatalf("GitRepo bootstrap of an earlier version: %v", err)
		}
		if !g.DeletionTimestamp.IsZero() || g.UID != earlier.GetUID() {
			t.Fatalf("GitRepo bootstrap of an earlier version deleted (deletion %v, uid %s, was %s)", g.DeletionTimestamp, g.UID, earlier.GetUID())
		}
	})

	t.Run("made by a user: kept", func(t *testing.T) {
		ns := "bootstrap-repo-byhand"
		newBootstrapNamespace(t, ns)
		mine := &fleet.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "bootstrap", Namespace: ns},
			Spec: fleet.GitRepoSpec{Repo: "https://example.com/mine.git", Branch: "main"}}
		if err := c.Create(ctx, mine, client.FieldOwner("kubectl-create")); err != nil {
			t.Fatal(err)
		}
		start(ns, registration.BootstrapRepo{})
		start(ns, registration.BootstrapRepo{})
		g := &fleet.GitRepo{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(mine), g); err != nil {
			t.Fatalf("user's GitRepo bootstrap: %v", err)
		}
		if !g.DeletionTimestamp.IsZero() || g.UID != mine.UID || g.Spec.Repo != mine.Spec.Repo || g.Spec.Branch != "main" {
			t.Fatalf("user's GitRepo bootstrap touched: deletion %v, uid %s (was %s), spec %+v", g.DeletionTimestamp, g.UID, mine.UID, g.Spec)
		}
	})
}

// TestBootstrapAgentNamespace: bootstrap.agentNamespace is Cluster
// "local"'s spec.agentNamespace, as Rancher Fleet's bootstrap sets it:
// applied at each start, removed when emptied again; never set, a value
// set by hand is left alone. A value that is no namespace name is left
// out with a Warning Event, keeping the value applied before, and the
// rest (labels) is applied. Once the manager installed the local agent
// (status.agentDeployedNamespace), a value that would move it is left out
// the same way: an installed agent is never moved.
func TestBootstrapAgentNamespace(t *testing.T) {
	ctx := context.Background()
	c := up.Client
	ns := "bootstrap-agentns"
	newBootstrapNamespace(t, ns)
	rec := eventRecorder(t)
	start := func(agentNS string, labels map[string]string) {
		t.Helper()
		opts := registration.Options{BootstrapNamespace: ns, BootstrapAgentNamespace: agentNS, BootstrapClusterLabels: labels,
			SystemNamespace: "cattle-fleet-system"}
		if err := registration.EnsureLocalObjectsRecording(ctx, c, opts, rec); err != nil {
			t.Fatalf("bootstrap: %v", err)
		}
	}
	key := client.ObjectKey{Namespace: ns, Name: fleet.LocalClusterName}
	want := func(agentNS string) *fleet.Cluster {
		t.Helper()
		cl := &fleet.Cluster{}
		if err := c.Get(ctx, key, cl); err != nil {
			t.Fatal(err)
		}
		if cl.Spec.AgentNamespace != agentNS {
			t.Fatalf("cluster local spec.agentNamespace %q, want %q", cl.Spec.AgentNamespace, agentNS)
		}
		return cl
	}

	// Not configured: a value set by hand stays.
	start("", nil)
	want("")
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cl := want("")
		cl.Spec.AgentNamespace = "by-hand"
		return c.Update(ctx, cl, client.FieldOwner("kubectl-edit"))
	}); err != nil {
		t.Fatal(err)
	}
	start("", nil)
	want("by-hand")

	// No agent recorded yet: the value is applied.
	start("cattle-local-agent", nil)
	want("cattle-local-agent")

	// A typo in the chart neither moves nor removes the agent; the labels
	// are applied all the same.
	start("Cattle_Local", map[string]string{"env": "prod"})
	if cl := want("cattle-local-agent"); cl.Labels["env"] != "prod" {
		t.Fatalf("cluster local labels %v, want env=prod applied", cl.Labels)
	}
	waitBootstrapWarning(t, ns, `bootstrap.agentNamespace "Cattle_Local"`)

	// Emptied again: the field the bootstrap set is removed.
	start("", nil)
	want("")

	// The agent installed in cattle-local-agent is not moved, neither to
	// another namespace nor, emptied, to the default one.
	start("cattle-local-agent", nil)
	recordDeployedNamespace(t, key, "cattle-local-agent")
	// The label changes the Cluster, so that the recorder does not count
	// the next warning into this one's series (same object version).
	start("cattle-fleet-local-system", map[string]string{"env": "staging"})
	want("cattle-local-agent")
	waitBootstrapWarning(t, ns, `bootstrap.agentNamespace "cattle-fleet-local-system": left out, the local agent keeps running in namespace cattle-local-agent`)
	start("", nil)
	want("cattle-local-agent")
	waitBootstrapWarning(t, ns, `bootstrap.agentNamespace "": left out, the local agent keeps running in namespace cattle-local-agent`)
}

// waitBootstrapWarning waits for a Warning Event InvalidBootstrapValues
// on Cluster "local" of ns whose note contains text.
func waitBootstrapWarning(t *testing.T, ns, text string) {
	t.Helper()
	eventually(t, "Warning Event InvalidBootstrapValues: "+text, func() error {
		var list eventsv1.EventList
		if err := up.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Name == fleet.LocalClusterName && e.Type == corev1.EventTypeWarning &&
				e.Reason == registration.ReasonInvalidBootstrapValues && strings.Contains(e.Note, text) {
				return nil
			}
		}
		return fmt.Errorf("none among %d events", len(list.Items))
	})
}

// recordDeployedNamespace records in the status of Cluster key that the
// manager installed its agent in ns, as an import does.
func recordDeployedNamespace(t *testing.T, key client.ObjectKey, ns string) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cl := &fleet.Cluster{}
		if err := up.Client.Get(context.Background(), key, cl); err != nil {
			return err
		}
		cl.Status.AgentDeployedNamespace = ns
		return up.Client.Status().Update(context.Background(), cl)
	}); err != nil {
		t.Fatal(err)
	}
}

// eventRecorder records Events to the upstream API server, as the
// manager's recorder does.
func eventRecorder(t *testing.T) events.EventRecorder {
	t.Helper()
	cs, err := kubernetes.NewForConfig(up.Config)
	if err != nil {
		t.Fatal(err)
	}
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	stop := make(chan struct{})
	b.StartRecordingToSink(stop)
	t.Cleanup(func() { close(stop); b.Shutdown() })
	return b.NewRecorder(testenv.Scheme, "fleet-bootstrap-test")
}
