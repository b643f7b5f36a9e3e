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
// rest (labels) is applied.
func TestBootstrapAgentNamespace(t *testing.T) {
	ctx := context.Background()
	c := up.Client
	ns := "bootstrap-agentns"
	newBootstrapNamespace(t, ns)
	rec := eventRecorder(t)
	start := func(agentNS string, labels map[string]string) {
		t.Helper()
		opts := registration.Options{BootstrapNamespace: ns, BootstrapAgentNamespace: agentNS, BootstrapClusterLabels: labels}
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

	start("cattle-local-agent", nil)
	want("cattle-local-agent")

	// A typo in the chart neither moves nor removes the agent; the labels
	// are applied all the same.
	start("Cattle_Local", map[string]string{"env": "prod"})
	if cl := want("cattle-local-agent"); cl.Labels["env"] != "prod" {
		t.Fatalf("cluster local labels %v, want env=prod applied", cl.Labels)
	}
	eventually(t, "Warning Event InvalidBootstrapValues", func() error {
		var list eventsv1.EventList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Name == fleet.LocalClusterName && e.Type == corev1.EventTypeWarning &&
				e.Reason == registration.ReasonInvalidBootstrapValues && strings.Contains(e.Note, `bootstrap.agentNamespace "Cattle_Local"`) {
				return nil
			}
		}
		return fmt.Errorf("none among %d events", len(list.Items))
	})

	// Emptied again: the field the bootstrap set is removed.
	start("", nil)
	want("")
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
