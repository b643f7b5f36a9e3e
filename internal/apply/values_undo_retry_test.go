package apply_test

import (
	"context"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
)

// bundleUpdates is a client whose Bundle updates go through onUpdate, so
// that a test can place another writer between the Secret write and the
// Bundle write, or fail a write the API server has stored, as a client
// timeout does. Everything else goes to the real API server.
type bundleUpdates struct {
	client.Client
	mu       sync.Mutex
	calls    int
	onUpdate func(call int, ctx context.Context, obj client.Object, opts ...client.UpdateOption) error
}

func (c *bundleUpdates) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if _, ok := obj.(*fleet.Bundle); !ok {
		return c.Client.Update(ctx, obj, opts...)
	}
	c.mu.Lock()
	c.calls++
	call := c.calls
	c.mu.Unlock()
	return c.onUpdate(call, ctx, obj, opts...)
}

// checkNamed fails t unless the values Secret of name holds the values
// the Bundle's hash names, with password as its password.
func checkNamed(t *testing.T, name, password string) {
	t.Helper()
	b := getBundle(t, name)
	sec := must(getSecret(name))
	if h := apply.HashValues(sec.Data); h != b.Spec.ValuesHash {
		t.Errorf("the values Secret does not hold the values the Bundle names (hash %s, Bundle's %s): the Bundle waits for its values", h, b.Spec.ValuesHash)
	}
	if got := storedValues(t, b)[apply.RootValuesKey]["password"]; got != password {
		t.Errorf("stored password %v, want %q", got, password)
	}
}

// Writer A stores its values, then its Bundle write conflicts because
// writer B has meanwhile stored values and Bundle of its own. A's retry
// writes its values over B's and its Bundle is then refused. The Secret
// must go back to B's values, which B's Bundle names, not to those A
// first found: that would leave B's Bundle waiting for values no one
// writes again.
func TestValuesUndoKeepsInterveningWriter(t *testing.T) {
	ctx := context.Background()
	const name = "undo-intervening"
	if err := apply.Apply(ctx, up.Client, []*fleet.Bundle{valuesBundle(name, "p0", nil)}, apply.Options{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	c := &bundleUpdates{Client: up.Client}
	c.onUpdate = func(call int, ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
		switch call {
		case 1:
			// B writes between A's Secret and A's Bundle; A's
			// Bundle write then conflicts.
			if err := apply.Apply(ctx, up.Client, []*fleet.Bundle{valuesBundle(name, "vb", nil)}, apply.Options{Namespace: ns}); err != nil {
				t.Errorf("writer B: %v", err)
			}
			return up.Client.Update(ctx, obj, opts...)
		default:
			return apierrors.NewForbidden(fleet.GroupVersion.WithResource("bundles").GroupResource(), name, errRefused)
		}
	}
	if err := apply.Apply(ctx, c, []*fleet.Bundle{valuesBundle(name, "va", nil)}, apply.Options{Namespace: ns}); err == nil {
		t.Fatal("apply with its Bundle write refused succeeded")
	}
	if c.calls < 2 {
		t.Fatalf("A's Bundle write was tried %d times, want a retry after the conflict", c.calls)
	}
	checkNamed(t, name, "vb")
}

// A Bundle write can fail on the client (a timeout) and still have been
// stored. The Bundle then names the values just written, which must stay:
// undoing them would leave it waiting for values no one writes again.
func TestValuesKeptWhenFailedBundleWriteWasStored(t *testing.T) {
	ctx := context.Background()
	const name = "undo-stored"
	if err := apply.Apply(ctx, up.Client, []*fleet.Bundle{valuesBundle(name, "p0", nil)}, apply.Options{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	c := &bundleUpdates{Client: up.Client}
	c.onUpdate = func(_ int, ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
		if err := up.Client.Update(ctx, obj, opts...); err != nil {
			return err
		}
		return apierrors.NewTimeoutError("the Bundle write timed out on the client", 1)
	}
	if err := apply.Apply(ctx, c, []*fleet.Bundle{valuesBundle(name, "va", nil)}, apply.Options{Namespace: ns}); err == nil {
		t.Fatal("apply whose Bundle write timed out succeeded")
	}
	checkNamed(t, name, "va")
}

type refusal struct{}

func (refusal) Error() string { return "bundle update refused for this test" }

var errRefused = refusal{}
