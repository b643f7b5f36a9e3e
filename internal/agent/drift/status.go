package drift

import (
	"sort"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// MaxListed caps nonReadyStatus and modifiedStatus; the rest is only
// counted, and incompleteState says so.
const MaxListed = 10

// Options tune the evaluation.
type Options struct {
	ComparePatches []fleet.ComparePatch
	// IgnoreConditions are removed from status.conditions before readiness
	// is computed; an entry matches a condition with all its key/values.
	IgnoreConditions []map[string]string
}

// LiveFunc returns the live object for a desired one, nil when it does not
// exist.
type LiveFunc func(desired *unstructured.Unstructured) (*unstructured.Unstructured, error)

// Result is what the agent reports in the BundleDeployment status.
type Result struct {
	Ready       bool
	NonModified bool
	NonReady    []fleet.NonReadyStatus
	Modified    []fleet.ModifiedStatus
	Incomplete  bool
	Resources   []fleet.BundleDeploymentResource
	Counts      fleet.ResourceCounts
}

// Evaluate compares every desired object with its live version and computes
// its readiness with kstatus.
func Evaluate(desired []*unstructured.Unstructured, live LiveFunc, opts Options) (Result, error) {
	res := Result{Ready: true, NonModified: true}
	for _, d := range desired {
		res.Counts.DesiredReady++
		l, err := live(d)
		if err != nil {
			return Result{}, err
		}
		ref := fleet.BundleDeploymentResource{Kind: d.GetKind(), APIVersion: d.GetAPIVersion(), Namespace: d.GetNamespace(), Name: d.GetName()}
		if l == nil {
			if ignoredWhenMissing(d, opts.ComparePatches) {
				// Deliberately absent ({op: ignore}): not expected at all.
				res.Counts.DesiredReady--
				continue
			}
			res.NonModified = false
			res.Counts.Missing++
			res.Modified = append(res.Modified, fleet.ModifiedStatus{
				Kind: ref.Kind, APIVersion: ref.APIVersion, Namespace: ref.Namespace, Name: ref.Name, Create: true,
			})
			continue
		}
		ref.CreatedAt = l.GetCreationTimestamp()
		res.Resources = append(res.Resources, ref)
		modified, patch, err := Diff(d, l, opts.ComparePatches)
		if err != nil {
			return Result{}, err
		}
		if modified {
			res.NonModified = false
			res.Modified = append(res.Modified, fleet.ModifiedStatus{
				Kind: ref.Kind, APIVersion: ref.APIVersion, Namespace: ref.Namespace, Name: ref.Name, Patch: patch,
			})
		}
		sum := Readiness(l, opts.IgnoreConditions)
		ready := sum.State == string(status.CurrentStatus)
		count(&res.Counts, modified, ready)
		if ready {
			continue
		}
		res.Ready = false
		res.NonReady = append(res.NonReady, fleet.NonReadyStatus{
			UID: string(l.GetUID()), Kind: ref.Kind, APIVersion: ref.APIVersion,
			Namespace: ref.Namespace, Name: ref.Name, Summary: sum,
		})
	}
	sortStatus(&res)
	if len(res.NonReady) > MaxListed {
		res.NonReady, res.Incomplete = res.NonReady[:MaxListed], true
	}
	if len(res.Modified) > MaxListed {
		res.Modified, res.Incomplete = res.Modified[:MaxListed], true
	}
	return res, nil
}

// count puts an existing object in exactly one bucket of resourceCounts
// (a missing one is Missing), so that the buckets add up to desiredReady:
// a modified object is Modified whether or not it is ready, then a
// not-ready one NotReady, as Rancher Fleet ranks an object's states (its
// modifiedStatus entry wins over its nonReadyStatus one). nonReadyStatus
// still lists a modified object that is not ready.
func count(c *fleet.ResourceCounts, modified, ready bool) {
	switch {
	case modified:
		c.Modified++
	case !ready:
		c.NotReady++
	default:
		c.Ready++
	}
}

func sortStatus(r *Result) {
	key := func(kind, ns, name string) string { return kind + "/" + ns + "/" + name }
	sort.Slice(r.NonReady, func(i, j int) bool {
		a, b := r.NonReady[i], r.NonReady[j]
		return key(a.Kind, a.Namespace, a.Name) < key(b.Kind, b.Namespace, b.Name)
	})
	sort.Slice(r.Modified, func(i, j int) bool {
		a, b := r.Modified[i], r.Modified[j]
		return key(a.Kind, a.Namespace, a.Name) < key(b.Kind, b.Namespace, b.Name)
	})
	sort.Slice(r.Resources, func(i, j int) bool {
		a, b := r.Resources[i], r.Resources[j]
		return key(a.Kind, a.Namespace, a.Name) < key(b.Kind, b.Namespace, b.Name)
	})
}

// Readiness is the kstatus result of one live object, after removing the
// ignored conditions. State is the kstatus status ("Current" means ready).
func Readiness(live *unstructured.Unstructured, ignore []map[string]string) fleet.Summary {
	obj := live
	if len(ignore) > 0 {
		obj = live.DeepCopy()
		conds, found, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		if found {
			kept := conds[:0]
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if !ignored(m, ignore) {
					kept = append(kept, c)
				}
			}
			_ = unstructured.SetNestedSlice(obj.Object, kept, "status", "conditions")
		}
	}
	res, err := status.Compute(obj)
	if err != nil {
		return fleet.Summary{State: string(status.UnknownStatus), Error: true, Message: []string{err.Error()}}
	}
	s := fleet.Summary{State: string(res.Status)}
	switch res.Status {
	case status.FailedStatus:
		s.Error = true
	case status.InProgressStatus, status.UnknownStatus, status.TerminatingStatus:
		s.Transitioning = true
	}
	if res.Message != "" {
		s.Message = []string{res.Message}
	}
	return s
}

func ignored(cond map[string]any, ignore []map[string]string) bool {
	for _, rule := range ignore {
		if len(rule) == 0 {
			continue
		}
		all := true
		for k, v := range rule {
			if s, _ := cond[k].(string); s != v {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}
