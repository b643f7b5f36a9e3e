// Package target decides which clusters a Bundle is deployed to, with which
// options, and how a new version is rolled out across them. Everything here is
// pure: the controller and the `fleet target` command feed it objects read from
// a cache or the API and act on the answer.
package target

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// ClusterInfo is a cluster together with the ClusterGroups it belongs to.
type ClusterInfo struct {
	Cluster *fleet.Cluster
	// Groups are the groups of the cluster's namespace whose selector
	// matches its labels (see GroupsOf).
	Groups []*fleet.ClusterGroup
}

// GroupsOf returns the groups (of any namespace) that contain the cluster: same
// namespace and a non-nil selector matching its labels. An invalid group
// selector matches nothing rather than failing every bundle.
func GroupsOf(c *fleet.Cluster, groups []*fleet.ClusterGroup) []*fleet.ClusterGroup {
	var out []*fleet.ClusterGroup
	for _, g := range groups {
		if g.Namespace != c.Namespace || g.Spec.Selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(g.Spec.Selector)
		if err != nil {
			continue
		}
		if sel.Matches(labels.Set(c.Labels)) {
			out = append(out, g)
		}
	}
	return out
}

// Criteria are the cluster-choosing fields shared by targets, restrictions
// and partitions.
type Criteria struct {
	ClusterName          string
	ClusterSelector      *metav1.LabelSelector
	ClusterGroup         string
	ClusterGroupSelector *metav1.LabelSelector
}

// Matcher is a compiled Criteria. All set criteria must hold (AND); a
// matcher with no criteria matches nothing.
type Matcher struct {
	name          string
	selector      labels.Selector
	group         string
	groupSelector labels.Selector
	empty         bool
}

// NewMatcher compiles criteria; an invalid selector is an error because it is
// bad user input that must show on the bundle.
func NewMatcher(c Criteria) (*Matcher, error) {
	m := &Matcher{name: c.ClusterName, group: c.ClusterGroup}
	m.empty = c.ClusterName == "" && c.ClusterSelector == nil && c.ClusterGroup == "" && c.ClusterGroupSelector == nil
	var err error
	if c.ClusterSelector != nil {
		if m.selector, err = metav1.LabelSelectorAsSelector(c.ClusterSelector); err != nil {
			return nil, fmt.Errorf("invalid clusterSelector: %w", err)
		}
	}
	if c.ClusterGroupSelector != nil {
		if m.groupSelector, err = metav1.LabelSelectorAsSelector(c.ClusterGroupSelector); err != nil {
			return nil, fmt.Errorf("invalid clusterGroupSelector: %w", err)
		}
	}
	return m, nil
}

// Match reports whether the cluster satisfies every set criterion.
func (m *Matcher) Match(ci ClusterInfo) bool {
	if m == nil || m.empty {
		return false
	}
	c := ci.Cluster
	if m.name != "" && m.name != c.Name && c.Labels[fleet.ClusterDisplayNameLabel] != m.name {
		return false
	}
	if m.selector != nil && !m.selector.Matches(labels.Set(c.Labels)) {
		return false
	}
	if m.group != "" || m.groupSelector != nil {
		// Group criteria are evaluated per group: one group must satisfy both.
		found := false
		for _, g := range ci.Groups {
			if m.group != "" && g.Name != m.group {
				continue
			}
			if m.groupSelector != nil && !m.groupSelector.Matches(labels.Set(g.Labels)) {
				continue
			}
			found = true
			break
		}
		if !found {
			return false
		}
	}
	return true
}

func targetCriteria(t fleet.BundleTarget) Criteria {
	return Criteria{ClusterName: t.ClusterName, ClusterSelector: t.ClusterSelector, ClusterGroup: t.ClusterGroup, ClusterGroupSelector: t.ClusterGroupSelector}
}

func restrictionCriteria(r fleet.BundleTargetRestriction) Criteria {
	return Criteria{ClusterName: r.ClusterName, ClusterSelector: r.ClusterSelector, ClusterGroup: r.ClusterGroup, ClusterGroupSelector: r.ClusterGroupSelector}
}

func partitionCriteria(p fleet.Partition) Criteria {
	return Criteria{ClusterName: p.ClusterName, ClusterSelector: p.ClusterSelector, ClusterGroup: p.ClusterGroup, ClusterGroupSelector: p.ClusterGroupSelector}
}

// BundleMatcher holds every compiled matcher of one bundle.
type BundleMatcher struct {
	bundle         *fleet.Bundle
	customizations []*Matcher
	targets        []*Matcher
	restrictions   []*Matcher
	partitions     []*Matcher
}

// NewBundleMatcher compiles a bundle's targets, restrictions and partitions.
// With N restrictions the first len(targets)-N targets are customizations and
// the last N the real targets (a GitRepo's); with none every target is real.
func NewBundleMatcher(b *fleet.Bundle) (*BundleMatcher, error) {
	bm := &BundleMatcher{bundle: b}
	nCustom := len(b.Spec.Targets) - len(b.Spec.TargetRestrictions)
	if len(b.Spec.TargetRestrictions) == 0 || nCustom < 0 {
		nCustom = 0
	}
	for i, t := range b.Spec.Targets {
		m, err := NewMatcher(targetCriteria(t))
		if err != nil {
			return nil, fmt.Errorf("target %q: %w", targetName(t, i), err)
		}
		if i < nCustom {
			bm.customizations = append(bm.customizations, m)
		} else {
			bm.targets = append(bm.targets, m)
		}
	}
	for i, r := range b.Spec.TargetRestrictions {
		m, err := NewMatcher(restrictionCriteria(r))
		if err != nil {
			return nil, fmt.Errorf("target restriction %d: %w", i, err)
		}
		bm.restrictions = append(bm.restrictions, m)
	}
	if rs := b.Spec.RolloutStrategy; rs != nil {
		for i, p := range rs.Partitions {
			m, err := NewMatcher(partitionCriteria(p))
			if err != nil {
				return nil, fmt.Errorf("partition %d: %w", i, err)
			}
			bm.partitions = append(bm.partitions, m)
		}
	}
	return bm, nil
}

// nCustom is the number of leading targets that are customizations.
func (bm *BundleMatcher) nCustom() int { return len(bm.customizations) }

// MatchAny reports whether any target, restriction or partition of the
// bundle could select this cluster. The controller uses it to re-evaluate
// only bundles a changed cluster can affect.
func (bm *BundleMatcher) MatchAny(ci ClusterInfo) bool {
	for _, list := range [][]*Matcher{bm.targets, bm.customizations, bm.restrictions} {
		for _, m := range list {
			if m.Match(ci) {
				return true
			}
		}
	}
	return false
}

// realTarget returns the index (into bundle.Spec.Targets) of the first real
// target matching the cluster, or -1.
func (bm *BundleMatcher) realTarget(ci ClusterInfo) int {
	for i, m := range bm.targets {
		if m.Match(ci) {
			return bm.nCustom() + i
		}
	}
	return -1
}

// restricted reports whether the allow-list excludes the cluster.
func (bm *BundleMatcher) restricted(ci ClusterInfo) bool {
	if len(bm.restrictions) == 0 {
		return false
	}
	for _, m := range bm.restrictions {
		if m.Match(ci) {
			return false
		}
	}
	return true
}

// matchingCustomizations returns the indexes of matching customizations in
// order.
func (bm *BundleMatcher) matchingCustomizations(ci ClusterInfo) []int {
	var out []int
	for i, m := range bm.customizations {
		if m.Match(ci) {
			out = append(out, i)
		}
	}
	return out
}

// Partitions returns the indexes of the manual partitions the cluster is in.
func (bm *BundleMatcher) Partitions(ci ClusterInfo) []int {
	var out []int
	for i, m := range bm.partitions {
		if m.Match(ci) {
			out = append(out, i)
		}
	}
	return out
}

func targetName(t fleet.BundleTarget, i int) string {
	if t.Name != "" {
		return t.Name
	}
	return fmt.Sprintf("target%03d", i)
}
