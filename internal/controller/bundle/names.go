package bundle

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/target"
)

// MaxNameLength is the longest Bundle or Cluster name that can be
// deployed. Every BundleDeployment carries its Bundle's name in label
// fleet.cattle.io/bundle-name and its Cluster's name in label
// fleet.cattle.io/cluster, as in Rancher Fleet (whose agents and tools
// select by them), and a label value holds at most 63 characters while an
// object name may have 253: the API server refuses any BundleDeployment of
// a longer name. Rancher Fleet has no check of its own and retries such a
// create forever; here the Bundle is refused whole and such a Cluster is
// not a target, each saying why.
const MaxNameLength = validation.LabelValueMaxLength

// bundleNameError is why a Bundle named name cannot be deployed, as a
// *target.BundleError (the Bundle is refused whole until it changes), or
// nil. A Bundle's name is a DNS-1123 subdomain, whose characters a label
// value allows, so only its length can be wrong.
func bundleNameError(name string) error {
	if len(name) <= MaxNameLength {
		return nil
	}
	return &target.BundleError{Err: fmt.Errorf("the Bundle name is %d characters long, at most %d are allowed: "+
		"it is the value of label %s on each of the Bundle's BundleDeployments, and a label value holds at most %d characters. "+
		"Nothing is deployed; create the Bundle again under a shorter name (for a fleet.yaml bundle, a shorter name:) and delete this one",
		len(name), MaxNameLength, fleet.BundleLabel, MaxNameLength)}
}

// clusterNameFits reports whether BundleDeployments can be written for c:
// its name fits in the fleet.cattle.io/cluster label. A Cluster with a
// longer name (created by hand) is not a target of any Bundle, so that
// every Bundle still deploys to the other clusters it matches instead of
// retrying a refused create; the Cluster's own status says why (the
// registration area refuses it a namespace).
func clusterNameFits(c *fleet.Cluster) bool {
	return len(c.Name) <= MaxNameLength
}

// reportInvalidName records one Warning Event when a Bundle is first
// refused for its name, and again only when the message changes. The
// status as read (old) already showing the refusal covers restarts;
// invalidReported covers reconciles before the cache shows the status
// this one writes.
func (r *Reconciler) reportInvalidName(b *fleet.Bundle, old *fleet.BundleStatus) {
	key := client.ObjectKeyFromObject(b)
	c := meta.FindStatusCondition(b.Status.Conditions, fleet.ConditionReady)
	if c == nil || c.Reason != ReasonInvalidName {
		r.invalidReported.Delete(key)
		return
	}
	if o := meta.FindStatusCondition(old.Conditions, fleet.ConditionReady); o != nil && o.Reason == c.Reason && o.Message == c.Message {
		return
	}
	if prev, ok := r.invalidReported.Load(key); ok && prev == c.Message {
		return
	}
	r.invalidReported.Store(key, c.Message)
	if r.Recorder != nil {
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, ReasonInvalidName, "Deploy", "%s", c.Message)
	}
}
