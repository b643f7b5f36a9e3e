package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/names"
)

// maxClusterStatusBytes bounds a check-in: a few numbers and at most six
// node names.
const maxClusterStatusBytes = 32 << 10

// serveClusterStatus takes one agent's check-in (a PUT of its
// ClusterStatus) and writes it on the Cluster's status. The API server has
// authorized the caller to update clusterstatuses in the namespace, which
// only the cluster's own credential may; the manager checks in addition
// that the caller is a ServiceAccount of that namespace and that the
// namespace is the named Cluster's, so a credential can report for its own
// Cluster only.
func (h *handler) serveClusterStatus(w http.ResponseWriter, r *http.Request, ns, name string) {
	gr := contentapi.ClusterStatusGroupResource
	if h.statuses == nil {
		// As if the resource did not exist: the agent then patches its
		// Cluster itself.
		writeStatus(w, apierrors.NewNotFound(gr, ""))
		return
	}
	if !h.admit(w, r, gr, http.MethodPut) {
		return
	}
	cs := &contentapi.ClusterStatus{}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxClusterStatusBytes+1))
	switch {
	case err != nil:
		writeStatus(w, apierrors.NewBadRequest("reading the check-in: "+err.Error()))
		return
	case len(body) > maxClusterStatusBytes:
		writeStatus(w, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("a check-in is at most %d bytes", maxClusterStatusBytes)))
		return
	}
	if err := json.Unmarshal(body, cs); err != nil {
		writeStatus(w, apierrors.NewBadRequest("decoding the check-in: "+err.Error()))
		return
	}
	if err := checkClusterStatus(h.user(r), ns, name, cs); err != nil {
		writeStatus(w, err)
		return
	}
	if !h.writeFirstCheckIn(r.Context(), ns, name, cs) {
		patch, err := cs.Status.MergePatch()
		if err != nil {
			writeStatus(w, apierrors.NewBadRequest(err.Error()))
			return
		}
		cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: cs.Workspace, Name: name}}
		if err := h.statuses.Status().Patch(r.Context(), cluster, client.RawPatch(types.MergePatchType, patch)); err != nil {
			writeStatus(w, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, contentapi.NewClusterStatus(cs.Workspace, ns, name, cs.Status))
}

// checkClusterStatus decides whether user may report cs as the check-in
// of Cluster name through cluster namespace ns: the body must agree with
// the path and name the Cluster's workspace, the caller must be a
// ServiceAccount of ns, and ns must be that Cluster's namespace.
func checkClusterStatus(user, ns, name string, cs *contentapi.ClusterStatus) error {
	gr := contentapi.ClusterStatusGroupResource
	switch {
	case cs.Name != "" && cs.Name != name:
		return apierrors.NewBadRequest(fmt.Sprintf("the check-in names cluster %q but was sent for %q", cs.Name, name))
	case cs.Namespace != "" && cs.Namespace != ns:
		return apierrors.NewBadRequest(fmt.Sprintf("the check-in names namespace %q but was sent to %q", cs.Namespace, ns))
	case cs.Workspace == "":
		return apierrors.NewBadRequest("the check-in must name the Cluster's workspace")
	case !strings.HasPrefix(user, "system:serviceaccount:"+ns+":"):
		return apierrors.NewForbidden(gr, name, fmt.Errorf("only a cluster's own credential reports its check-ins, not %q", user))
	case names.ClusterNamespace(cs.Workspace, name) != ns:
		return apierrors.NewForbidden(gr, name, fmt.Errorf("namespace %s is not the cluster namespace of Cluster %s/%s", ns, cs.Workspace, name))
	}
	return nil
}

// writeFirstCheckIn writes the first check-in of a cluster's agent together
// with the Cluster status it brings about (h.firstCheckIn), under the
// resourceVersion of the cached Cluster, and reports whether it did. Any
// other check-in, a Cluster the cache does not show as waiting for its
// first one, and a failed or conflicting write leave the check-in to the
// plain patch of the agent's fields (the Cluster controller then writes
// the rest, as it would anyway); so does every check-in a standby replica
// serves (Options.Elected).
func (h *handler) writeFirstCheckIn(ctx context.Context, ns, name string, cs *contentapi.ClusterStatus) bool {
	if h.firstCheckIn == nil || h.cache == nil {
		return false
	}
	if h.elected != nil {
		select {
		case <-h.elected:
		default:
			return false
		}
	}
	c := &fleet.Cluster{}
	if err := h.cache.Get(ctx, client.ObjectKey{Namespace: cs.Workspace, Name: name}, c); err != nil ||
		!c.Status.Agent.LastSeen.IsZero() || c.Status.Namespace != ns || c.DeletionTimestamp != nil {
		return false
	}
	updated := c.DeepCopy()
	cs.Status.Apply(&updated.Status)
	if err := h.firstCheckIn(ctx, updated); err != nil {
		return false
	}
	return h.statuses.Status().Patch(ctx, updated, client.MergeFromWithOptions(c, client.MergeFromWithOptimisticLock{})) == nil
}
