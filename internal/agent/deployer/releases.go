package deployer

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"

	release "helm.sh/helm/v4/pkg/release/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// ReleaseRef is one release the agent deployed, found from its storage
// Secrets.
type ReleaseRef struct {
	Name, Namespace string
	// BundleDeployment is the full name of the BundleDeployment it came
	// from; empty when that cannot be told (see Unresolved).
	BundleDeployment string
	// Unresolved is the storage label of a release whose label may be a
	// BundleDeployment name cut to fit a label value, and whose latest
	// revision does not name a BundleDeployment that the label is the cut
	// of. Nothing is removed for such a release: under the cut name the
	// BundleDeployment would look gone while it exists.
	Unresolved      string
	KeepResources   bool
	DeleteNamespace bool
}

// Releases lists this agent's releases with a single label-selected list of
// Helm's storage Secrets. Only revisions the agent wrote count: a storage
// Secret without its valid signature (SignatureLabel) is never taken for a
// release of the agent, whatever its labels say, and is logged (its
// namespace, name and why, never its content). A release with no such
// revision is left out, so that neither garbage collection nor the
// clean-up of a deleted BundleDeployment acts on it.
//
// Each release is described by its latest signed revision (the highest
// version, compared as a number: the API server lists v10 before v2): its
// flags are what the BundleDeployment last asked for, whatever older
// revisions say.
//
// The BundleDeployment is the storage label, which is the full name for
// names up to 63 characters (a label value's limit). A longer name is cut
// (names.Limit) and the label alone cannot tell it from a name of that
// length: for a label that may be such a cut (mayBeCutName) the full name
// is the one the revision's chart records (annotation
// fleet.cattle.io/bundle-id).
func (d *Deployer) Releases(ctx context.Context) ([]ReleaseRef, error) {
	sig, err := d.signer(ctx)
	if err != nil {
		return nil, err
	}
	list, err := d.core.Secrets("").List(ctx, metav1.ListOptions{
		LabelSelector: "owner=helm," + StorageAgentNamespaceLbl + "=" + d.agentNamespace,
	})
	if err != nil {
		return nil, err
	}
	type revision struct {
		version int
		secret  *corev1.Secret
		verdict verdict
	}
	seen := d.verdicts.begin()
	defer d.verdicts.end(seen)
	byKey := map[string][]revision{}
	var keys []string
	for i := range list.Items {
		s := &list.Items[i]
		// A revision the agent wrote is grouped and ordered by what its
		// signature covers; any other by its labels, only to be logged.
		v := d.verdicts.of(seen, sig, s)
		name, version := v.name, v.version
		if !v.trusted {
			if name = s.Labels["name"]; name == "" {
				continue
			}
			// A revision without a readable version counts as the oldest.
			var err error
			if version, err = strconv.Atoi(s.Labels["version"]); err != nil {
				version = -1
			}
		}
		key := s.Namespace + "/" + name
		if _, ok := byKey[key]; !ok {
			keys = append(keys, key)
		}
		byKey[key] = append(byKey[key], revision{version: version, secret: s, verdict: v})
	}
	log := crlog.FromContext(ctx)
	out := make([]ReleaseRef, 0, len(keys))
	for _, key := range keys {
		revs := byKey[key]
		slices.SortFunc(revs, func(a, b revision) int { return b.version - a.version })
		// Newest first, up to the latest the agent wrote.
		var latest *corev1.Secret
		var chartBundleID, latestName string
		var ignored []string
		reason := ""
		for _, r := range revs {
			v := r.verdict
			if v.trusted {
				latest, chartBundleID, latestName = r.secret, v.bundleID, v.name
				break
			}
			ignored = append(ignored, r.secret.Name)
			if reason == "" {
				reason = v.reason
			}
		}
		if len(ignored) > 0 {
			log.Info("ignoring Helm release storage this agent did not write: it is never uninstalled, nor taken for a release of the agent",
				"release", key, "secrets", strings.Join(ignored, ","), "reason", reason)
		}
		if latest == nil {
			continue
		}
		ref := ReleaseRef{
			Name: latestName, Namespace: latest.Namespace,
			BundleDeployment: latest.Labels[StorageBundleIDLabel],
			KeepResources:    latest.Labels[StorageKeepResourcesLabel] == "true",
			DeleteNamespace:  latest.Labels[StorageDeleteNSLabel] == "true",
		}
		if mayBeCutName(ref.BundleDeployment) {
			ref.BundleDeployment, ref.Unresolved = resolveCut(chartBundleID, ref.BundleDeployment)
		}
		out = append(out, ref)
	}
	return out, nil
}

// verdict is whether the agent wrote one storage Secret.
type verdict struct {
	resourceVersion string
	trusted         bool
	// reason says why it is not trusted.
	reason string
	// bundleID is the chart's fleet.cattle.io/bundle-id of a trusted one.
	bundleID string
	// name and version are the release and revision a trusted one's
	// signed payload is.
	name    string
	version int
}

// verdicts remembers the verdicts of the last Releases, so that a Secret
// that has not changed is not decoded and verified again on every garbage
// collection and every clean-up. It keeps only the Secrets the last call
// looked at.
type verdicts struct {
	mu   sync.Mutex
	last map[string]verdict
}

func (v *verdicts) begin() map[string]verdict { return map[string]verdict{} }

func (v *verdicts) end(seen map[string]verdict) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.last = seen
}

// of returns the verdict on s, remembered or made now, and records it in
// seen.
func (v *verdicts) of(seen map[string]verdict, sig *signer, s *corev1.Secret) verdict {
	key := s.Namespace + "/" + s.Name
	v.mu.Lock()
	old, ok := v.last[key]
	v.mu.Unlock()
	if !ok || old.resourceVersion != s.ResourceVersion {
		old = judge(sig, s)
	}
	seen[key] = old
	return old
}

// judge verifies storage Secret s. Its reason never quotes the Secret.
func judge(sig *signer, s *corev1.Secret) verdict {
	out := verdict{resourceVersion: s.ResourceVersion}
	if s.Labels[SignatureLabel] == "" {
		out.reason = "not signed by this agent"
		if sig.beforeKey(s) {
			out.reason = "stored before this agent signed its releases; kept, and adopted when its bundledeployment deploys it again"
		}
		return out
	}
	rel, err := decodeStored(s.Data["release"])
	if err != nil {
		out.reason = "unreadable"
		return out
	}
	if !sig.verifySecret(s, rel) {
		out.reason = "its signature is not this agent's, it changed since it was signed, or its name or labels are not the signed revision's"
		if sig.beforeKey(s) {
			out.reason = "signed with a key this agent no longer has; kept, and adopted when its bundledeployment deploys it again"
		}
		return out
	}
	out.trusted = true
	out.bundleID = chartBundleID(rel)
	out.name, out.version = rel.Name, rel.Version
	return out
}

// chartBundleID is the BundleDeployment rel's chart records.
func chartBundleID(rel *release.Release) string {
	if rel.Chart == nil || rel.Chart.Metadata == nil {
		return ""
	}
	return rel.Chart.Metadata.Annotations[fleet.BundleIDAnnotation]
}
