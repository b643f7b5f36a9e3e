package deployer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"helm.sh/helm/v4/pkg/kube"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/resource"
	"k8s.io/client-go/util/retry"
)

// actionClient is Helm's kube client for one install or upgrade of the
// agent. It does two things Helm's own client does not.
//
// It server-side applies an upgrade without reading first (fastApply).
// Helm's own Update first GETs each object only to learn whether the apply
// will create or update it; an apply does both, and its answer says which
// (201 or 200). So this client applies each object at once and classifies
// it from the answer: one request per object instead of two. On a
// five-object bundle that is five of the sixteen requests an upgrade made
// on the downstream API server, and their decoding in the agent.
//
// Only the upgrade's own apply is replaced, once: objects that left the
// release are deleted by Helm's code (which honours
// helm.sh/resource-policy: keep), and every later Update of the action (a
// rollback after a failed atomic upgrade, which migrates field ownership)
// is Helm's. The Deployer asks for fastApply only for a plain upgrade:
// server-side apply over a release Helm also applied server-side (not a
// forced replace, nor the first apply over a client-side applied release,
// which must migrate field ownership first).
//
// And it parses each manifest of the action once (Build, in build.go).
type actionClient struct {
	*kube.Client
	// ctx is the deploy's: the client lives for one action.
	ctx            context.Context
	forceConflicts bool
	// fastApply replaces the action's first Update (see above).
	fastApply bool
	// updated is set by the action's first Update.
	updated atomic.Bool

	builds
}

// IsReachable answers Helm's reachability check without a request. Helm
// builds a whole clientset (about 60 REST clients) and asks the server for
// its version before every install and upgrade; the agent has just read
// the release's history from the same server, so a cluster that cannot be
// reached has already failed the deploy with that error.
func (c *actionClient) IsReachable() error { return nil }

// Update applies every target, then lets Helm delete the originals no
// longer among them. Like Helm, it applies all targets before reporting
// their errors and deletes nothing when one failed.
func (c *actionClient) Update(originals, targets kube.ResourceList, options ...kube.ClientUpdateOption) (*kube.Result, error) {
	if first := !c.updated.Swap(true); !c.fastApply || !first {
		return c.Client.Update(originals, targets, options...)
	}
	res := &kube.Result{}
	var errs []error
	for _, info := range targets {
		// A failed apply counts as an update (see apply).
		created, err := c.apply(info)
		if created {
			res.Created = append(res.Created, info)
		} else {
			res.Updated = append(res.Updated, info)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return res, errors.Join(errs...)
	}
	removed := originals.Difference(targets)
	if len(removed) == 0 {
		return res, nil
	}
	del, err := c.Client.Update(removed, kube.ResourceList{}, options...)
	if del != nil {
		res.Deleted = del.Deleted
	}
	return res, err
}

// apply server-side applies info's object as Helm would (its field
// manager, strict field validation, forcing conflicts when asked) and
// refreshes info from the answer. created is true when the object did not
// exist before; a failed apply counts as an update, so that nothing that
// may have existed is ever cleaned up as if this upgrade had created it.
// A create refused for a ResourceQuota conflict is retried, as Helm does.
func (c *actionClient) apply(info *resource.Info) (created bool, err error) {
	data, err := runtime.Encode(unstructured.UnstructuredJSONScheme, info.Object)
	if err != nil {
		return false, fmt.Errorf("failed to encode object %s/%s %s: %w", info.Namespace, info.Name, info.Mapping.GroupVersionKind, err)
	}
	force := c.forceConflicts
	opts := &metav1.PatchOptions{
		FieldManager:    kube.ManagedFieldsManager,
		FieldValidation: string(kube.FieldValidationDirectiveStrict),
		Force:           &force,
	}
	var (
		code int
		obj  runtime.Object
	)
	err = retry.OnError(retry.DefaultRetry, isQuotaConflict, func() (err error) {
		obj, err = info.Client.Patch(types.ApplyPatchType).
			NamespaceIfScoped(info.Namespace, info.Mapping.Scope.Name() == meta.RESTScopeNameNamespace).
			Resource(info.Mapping.Resource.Resource).
			Name(info.Name).
			VersionedParams(opts, metav1.ParameterCodec).
			Body(data).
			Do(c.ctx).
			StatusCode(&code).
			Get()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("server-side apply failed for object %s/%s %s: %w", info.Namespace, info.Name, info.Mapping.GroupVersionKind, err)
	}
	return code == http.StatusCreated, info.Refresh(obj, true)
}

// isQuotaConflict reports a conflict on a ResourceQuota's usage, which
// the quota admission returns while another write updates it: it passes.
func isQuotaConflict(err error) bool {
	return apierrors.IsConflict(err) && strings.Contains(err.Error(), "resourcequotas")
}
