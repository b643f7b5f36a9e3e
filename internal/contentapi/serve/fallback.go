package serve

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
)

// AggregationLayer reports whether the API server can route to the content
// API: it publishes a request-header CA in
// kube-system/extension-apiserver-authentication, which it does only when
// its aggregation layer is configured (--requestheader-client-ca-file).
// Without it the content API could never authenticate a proxied request,
// so the manager falls back to granting Contents through RBAC.
//
// Only a published ConfigMap without the CA is an answer: an error (a
// missing permission, or the ConfigMap not written yet by an API server
// that is still starting) means it cannot tell, and the caller keeps the
// content API, since switching a running fleet to RBAC would leave the
// clusters registered before without their ClusterRoleBinding.
func AggregationLayer(ctx context.Context, r client.Reader) (bool, error) {
	cm := &corev1.ConfigMap{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: metav1.NamespaceSystem, Name: authConfigMap}, cm); err != nil {
		return false, fmt.Errorf("reading %s/%s: %w", metav1.NamespaceSystem, authConfigMap, err)
	}
	return cm.Data[keyRequestHeaderCA] != "", nil
}

// SetupWithdraw makes the leader delete the content API's APIService if a
// manager that served the content API left one behind (and it is Fleet's):
// while it exists without a server behind it the API server reports the
// group unavailable, discovery of every client reports an error, and
// namespace deletion waits for it. Agents that find no content API read
// Contents directly.
func SetupWithdraw(mgr ctrl.Manager) error {
	return mgr.Add(&withdraw{live: mgr.GetAPIReader(), c: mgr.GetClient()})
}

type withdraw struct {
	live client.Reader
	c    client.Client
}

// NeedLeaderElection: one replica deletes.
func (w *withdraw) NeedLeaderElection() bool { return true }

func (w *withdraw) Start(ctx context.Context) error {
	l := log.FromContext(ctx).WithName("content-api")
	cur := contentapi.APIService()
	err := w.live.Get(ctx, client.ObjectKeyFromObject(cur), cur)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err == nil && cur.GetLabels()[fleet.ManagedLabel] != "true" {
		l.Info("the content API is off, but an APIService not written by Fleet serves its group; leaving it", "apiService", contentapi.APIServiceName)
		return nil
	}
	if err == nil {
		err = w.c.Delete(ctx, cur, client.Preconditions{UID: ptr.To(cur.GetUID())})
	}
	switch {
	case err == nil:
		l.Info("the content API is off: deleted the APIService an earlier manager registered", "apiService", contentapi.APIServiceName)
	case !apierrors.IsNotFound(err):
		// Not fatal: agents still read Contents directly.
		l.Error(err, "the content API is off, but its APIService could not be deleted", "apiService", contentapi.APIServiceName)
	}
	return nil
}
