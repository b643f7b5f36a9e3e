package apply_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
)

// holdFinalizer keeps a deleted Bundle in deletion for the test, as the
// manager's finalizer does while it removes the Bundle's deployments.
const holdFinalizer = "test.fleet.cattle.io/hold"

// TestApplyRefusesBundleBeingDeleted: a Bundle with a deletionTimestamp is
// gone as soon as its finalizers are; an update written to it now would be
// lost with it while the caller is told it landed. Apply refuses it with
// an error naming the Bundle, writes neither the Bundle nor its values,
// prunes nothing, and once the deletion has completed the same apply
// creates the Bundle afresh, which is how a GitRepo's or HelmOp's retry
// recovers.
func TestApplyRefusesBundleBeingDeleted(t *testing.T) {
	ctx := context.Background()
	origin := map[string]string{fleet.RepoLabel: "dying-repo"}
	mk := func(name, content string, replicas int64) *fleet.Bundle {
		b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: origin}}
		b.Spec.Resources = []fleet.BundleResource{{Name: "x.yaml", Content: content}}
		b.Spec.Helm = &fleet.HelmOptions{Values: &fleet.GenericMap{Data: map[string]interface{}{"replicas": replicas}}}
		return b
	}
	opts := apply.Options{Namespace: ns, PruneSelector: origin}
	if _, err := apply.ApplyWithResult(ctx, up.Client, []*fleet.Bundle{mk("dying", "v1\n", 1), mk("dying-sibling", "s\n", 1)}, opts); err != nil {
		t.Fatal(err)
	}
	dying := getBundle(t, "dying")
	dying.Finalizers = append(dying.Finalizers, holdFinalizer)
	if err := up.Client.Update(ctx, dying); err != nil {
		t.Fatal(err)
	}
	if err := up.Client.Delete(ctx, dying); err != nil {
		t.Fatal(err)
	}
	before := getBundle(t, "dying")
	if before.DeletionTimestamp == nil {
		t.Fatal("the finalizer did not keep the Bundle in deletion")
	}
	secretBefore, err := getSecret("dying")
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name   string
		bundle *fleet.Bundle
	}{
		{name: "changed", bundle: mk("dying", "v2\n", 2)},
		{name: "unchanged", bundle: mk("dying", "v1\n", 1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// dying-sibling is not in the set: a successful apply would
			// prune it.
			res, err := apply.ApplyWithResult(ctx, up.Client, []*fleet.Bundle{tc.bundle}, opts)
			if !errors.Is(err, apply.ErrBeingDeleted) {
				t.Fatalf("error %v, want ErrBeingDeleted", err)
			}
			if msg := err.Error(); !strings.Contains(msg, ns+"/dying") || !strings.Contains(msg, "being deleted") {
				t.Errorf("error %q does not name the Bundle and say it is being deleted", msg)
			}
			if errors.Is(err, apply.ErrInvalidValues) || errors.Is(err, apply.ErrOwnedByOther) {
				t.Errorf("error %v reads as bad input; it is retryable", err)
			}
			if len(res.Created)+len(res.Updated)+len(res.Unchanged)+len(res.Deleted) != 0 {
				t.Errorf("result %+v, want nothing written", res)
			}
			after := getBundle(t, "dying")
			if after.ResourceVersion != before.ResourceVersion {
				t.Errorf("the Bundle being deleted was written: %+v", after.Spec.Resources)
			}
			secretAfter, err := getSecret("dying")
			if err != nil {
				t.Fatal(err)
			}
			if secretAfter.ResourceVersion != secretBefore.ResourceVersion || !reflect.DeepEqual(secretAfter.Data, secretBefore.Data) {
				t.Error("the values Secret of the Bundle being deleted was written")
			}
			if _, err := getSecret("dying-sibling"); err != nil {
				t.Errorf("sibling's values: %v", err)
			}
			if err := up.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "dying-sibling"}, &fleet.Bundle{}); err != nil {
				t.Errorf("a failed apply pruned: %v", err)
			}
		})
	}

	// The deletion completes; the retry creates the Bundle afresh.
	gone := getBundle(t, "dying")
	gone.Finalizers = nil
	if err := up.Client.Update(ctx, gone); err != nil {
		t.Fatal(err)
	}
	res, err := apply.ApplyWithResult(ctx, up.Client, []*fleet.Bundle{mk("dying", "v2\n", 2), mk("dying-sibling", "s\n", 1)}, opts)
	if err != nil {
		t.Fatalf("apply after the deletion completed: %v", err)
	}
	if !reflect.DeepEqual(res.Created, []string{"dying"}) {
		t.Errorf("created %v, want [dying]", res.Created)
	}
	fresh := getBundle(t, "dying")
	if fresh.UID == before.UID || fresh.DeletionTimestamp != nil || fresh.Spec.Resources[0].Content != "v2\n" {
		t.Errorf("Bundle after the retry: uid %s (was %s), deletionTimestamp %v, content %q",
			fresh.UID, before.UID, fresh.DeletionTimestamp, fresh.Spec.Resources[0].Content)
	}
	if got := storedValues(t, fresh)[apply.RootValuesKey]["replicas"]; got != float64(2) {
		t.Errorf("values after the retry: replicas %v, want 2", got)
	}
}
