package register

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// TestStoredCredentialForgetsBootstrap: an agent starts with a stored
// credential the manager (here a real API server) accepts and, next to it,
// a fleet-agent-bootstrap Secret with a live registration token for the
// same API server, CA and workspace, as a re-import or a `helm upgrade` of
// the fleet-agent chart writes it when nothing of those changed. It goes
// on with the stored credential, files no registration, and deletes the
// bootstrap Secret, so that the token is not left readable in the cluster.
func TestStoredCredentialForgetsBootstrap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := newWorld(t, ctx, "forget")
	cred := w.storeCredential(ctx, w.up.Config.Host, w.up.Config.CAData)
	w.writeBootstrap(ctx, w.up.Config.Host, w.up.Config.CAData)

	got, err := Get(ctx, Options{Downstream: w.up.Client, Namespace: w.agentNS})
	if err != nil {
		t.Fatalf("Get with a valid stored credential: %v", err)
	}
	if got.Token() != cred.Token() || got.DeploymentNamespace != w.clusterNS || got.ClusterName != w.clusterName {
		t.Errorf("Get returned another credential: namespace %q, cluster %q, same token %v", got.DeploymentNamespace, got.ClusterName, got.Token() == cred.Token())
	}
	if err := w.bootstrapErr(ctx); !apierrors.IsNotFound(err) {
		t.Errorf("the bootstrap secret is still there next to the accepted credential: %v", err)
	}
	if n := len(w.registrations(ctx)); n != 0 {
		t.Errorf("%d registrations filed with a working credential that the bootstrap secret only repeats", n)
	}
	// The agent still works: the stored credential stays and is accepted,
	// also without a bootstrap Secret.
	if host, _ := w.storedServer(ctx); host != w.up.Config.Host {
		t.Errorf("stored credential for %s, want %s", host, w.up.Config.Host)
	}
	again, err := Get(ctx, Options{Downstream: w.up.Client, Namespace: w.agentNS})
	if err != nil || again.Token() != cred.Token() {
		t.Fatalf("second start: %v", err)
	}
	if err := Check(ctx, again); err != nil {
		t.Errorf("the stored credential no longer works: %v", err)
	}
}
