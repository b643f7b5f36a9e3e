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
	// Unknown are the groups of the cluster's namespace whose selector
	// cannot be evaluated: whether the cluster is in them is not known,
	// so no criterion that could choose it through one of them can be
	// decided (see Matcher.Undecided).
	Unknown []InvalidGroup
}

// InvalidGroup is a ClusterGroup whose selector the API server accepted but
// that cannot be evaluated (operator In without values, an unknown
// operator, ...).
type InvalidGroup struct {
	Group *fleet.ClusterGroup
	Err   error
}

func (g InvalidGroup) Error() string {
	return fmt.Sprintf("ClusterGroup %s/%s has a selector that cannot be evaluated: %v", g.Group.Namespace, g.Group.Name, g.Err)
}

// NewClusterInfo is the cluster with its groups and the groups whose
// membership is unknown, out of the groups given (of any namespace).
func NewClusterInfo(c *fleet.Cluster, groups []*fleet.ClusterGroup) ClusterInfo {
	in, unknown := GroupsOf(c, groups)
	return ClusterInfo{Cluster: c, Groups: in, Unknown: unknown}
}

// GroupsOf returns the groups (of any namespace) that contain the cluster:
// same namespace and a non-nil selector matching its labels. The groups of
// its namespace whose selector cannot be evaluated are returned apart:
// treating one as empty would drop its clusters from every target that
// names it and delete what is deployed there.
func GroupsOf(c *fleet.Cluster, groups []*fleet.ClusterGroup) (in []*fleet.ClusterGroup, unknown []InvalidGroup) {
	for _, g := range groups {
		if g.Namespace != c.Namespace || g.Spec.Selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(g.Spec.Selector)
		if err != nil {
			unknown = append(unknown, InvalidGroup{Group: g, Err: err})
			continue
		}
		if sel.Matches(labels.Set(c.Labels)) {
			in = append(in, g)
		}
	}
	return in, unknown
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
	if m == nil || m.empty || !m.matchCluster(ci.Cluster) {
		return false
	}
	if !m.usesGroups() {
		return true
	}
	// Group criteria are evaluated per group: one group must satisfy both.
	for _, g := range ci.Groups {
		if m.groupFits(g) {
			return true
		}
	}
	return false
}

// Undecided returns a group of ci.Unknown that decides whether m matches
// the cluster, or nil when the answer is known without them: m has no
// group criteria, its other criteria already fail, or a group the cluster
// is known to be in satisfies them. Of several such groups the one with
// the smallest name is returned, so that the message naming it does not
// depend on the order of a cache.
func (m *Matcher) Undecided(ci ClusterInfo) *InvalidGroup {
	if len(ci.Unknown) == 0 || m == nil || m.empty || !m.usesGroups() || m.Match(ci) || !m.matchCluster(ci.Cluster) {
		return nil
	}
	var out *InvalidGroup
	for i := range ci.Unknown {
		if m.groupFits(ci.Unknown[i].Group) && (out == nil || ci.Unknown[i].Group.Name < out.Group.Name) {
			out = &ci.Unknown[i]
		}
	}
	return out
}

// matchCluster checks the criteria read from the cluster itself.
func (m *Matcher) matchCluster(c *fleet.Cluster) bool {
	if m.name != "" && m.name != c.Name && c.Labels[fleet.ClusterDisplayNameLabel] != m.name {
		return false
	}
	return m.selector == nil || m.selector.Matches(labels.Set(c.Labels))
}

func (m *Matcher) usesGroups() bool { return m.group != "" || m.groupSelector != nil }

// groupFits checks the group criteria against one group.
func (m *Matcher) groupFits(g *fleet.ClusterGroup) bool {
	return (m.group == "" || g.Name == m.group) && (m.groupSelector == nil || m.groupSelector.Matches(labels.Set(g.Labels)))
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
// bundle could select this cluster, also through a group whose selector
// cannot be evaluated (the bundle's stalled state may change with it). The
// controller uses it to re-evaluate only bundles a changed cluster can
// affect. It covers every matcher undecided looks at. A partition counts
// only through an invalid group: one that merely matches a cluster no
// target selects changes nothing, and a targeted cluster is matched by a
// target already.
func (bm *BundleMatcher) MatchAny(ci ClusterInfo) bool {
	for _, list := range [][]*Matcher{bm.targets, bm.customizations, bm.restrictions} {
		for _, m := range list {
			if m.Match(ci) || m.Undecided(ci) != nil {
				return true
			}
		}
	}
	for _, m := range bm.partitions {
		if m.Undecided(ci) != nil {
			return true
		}
	}
	return false
}

// undecided returns a group of ci.Unknown on which the bundle's answer
// for this cluster depends, or nil. It follows selectFor's order, so that
// a group is reported only when it can change the answer: the first real
// target known to match decides (a later undecided one cannot); one
// restriction known to match allows the cluster; customizations and
// partitions count only for a cluster known to be targeted. A deleting
// cluster is never targeted (Compute skips it).
func (bm *BundleMatcher) undecided(ci ClusterInfo) *InvalidGroup {
	if len(ci.Unknown) == 0 || ci.Cluster.DeletionTimestamp != nil {
		return nil
	}
	idx, g := firstMatch(bm.targets, ci)
	if g != nil || idx < 0 || bm.bundle.Spec.Targets[bm.nCustom()+idx].DoNotDeploy {
		return g
	}
	if g := bm.undecidedRestriction(ci); g != nil || bm.restricted(ci) {
		return g
	}
	if g := bm.undecidedCustomization(ci); g != nil {
		return g
	}
	for _, m := range bm.partitions {
		if g := m.Undecided(ci); g != nil {
			return g
		}
	}
	return nil
}

// firstMatch returns the index of the first matcher known to match the
// cluster, or the group deciding a matcher before it (and -1).
func firstMatch(ms []*Matcher, ci ClusterInfo) (int, *InvalidGroup) {
	for i, m := range ms {
		if m.Match(ci) {
			return i, nil
		}
		if g := m.Undecided(ci); g != nil {
			return -1, g
		}
	}
	return -1, nil
}

// undecidedRestriction returns a group deciding whether the allow-list
// lets the cluster in: none when a restriction is known to match.
func (bm *BundleMatcher) undecidedRestriction(ci ClusterInfo) *InvalidGroup {
	if len(bm.restrictions) == 0 || !bm.restricted(ci) {
		return nil
	}
	for _, m := range bm.restrictions {
		if g := m.Undecided(ci); g != nil {
			return g
		}
	}
	return nil
}

// undecidedCustomization returns a group deciding which customizations
// apply: any one of them with AllMatches, else one before the first
// customization known to match.
func (bm *BundleMatcher) undecidedCustomization(ci ClusterInfo) *InvalidGroup {
	if bm.bundle.Spec.TargetCustomizationMode != fleet.AllMatches {
		_, g := firstMatch(bm.customizations, ci)
		return g
	}
	for _, m := range bm.customizations {
		if g := m.Undecided(ci); g != nil {
			return g
		}
	}
	return nil
}

// UnknownGroupError is returned for a bundle whose targets cannot be
// computed because a ClusterGroup one of its criteria could choose a
// cluster through has a selector that cannot be evaluated.
type UnknownGroupError struct {
	InvalidGroup
	// Cluster is the first cluster whose targeting depends on the group.
	Cluster *fleet.Cluster
}

func (e *UnknownGroupError) Error() string {
	return fmt.Sprintf("%v; whether cluster %s/%s is targeted depends on it, so the bundle's targets are not recomputed and its BundleDeployments are left as they are until the group is fixed",
		e.InvalidGroup.Error(), e.Cluster.Namespace, e.Cluster.Name)
}

func (e *UnknownGroupError) Unwrap() error { return e.Err }

// UnknownGroups returns an UnknownGroupError naming the cluster with the
// smallest namespace/name whose targeting by b depends on a ClusterGroup
// whose selector cannot be evaluated, or nil. Such a group cannot be taken
// as empty: its clusters would drop out of every target naming it and
// lose what is deployed to them. Rancher Fleet logs the group and skips
// it; a bundle not choosing clusters by group is not concerned. The
// cluster named does not depend on the order of clusters (a cache's), so
// the stalled bundle's message does not change between reconciles. An
// invalid bundle gives nil here (Compute reports it). Pure.
func UnknownGroups(b *fleet.Bundle, clusters []ClusterInfo) error {
	var (
		bm  *BundleMatcher
		out *UnknownGroupError
	)
	for _, ci := range clusters {
		if len(ci.Unknown) == 0 {
			continue
		}
		if bm == nil {
			var err error
			if bm, err = NewBundleMatcher(b); err != nil {
				return nil
			}
		}
		if out != nil && !clusterLess(ci.Cluster, out.Cluster) {
			continue
		}
		if g := bm.undecided(ci); g != nil {
			out = &UnknownGroupError{InvalidGroup: *g, Cluster: ci.Cluster}
		}
	}
	if out == nil {
		return nil
	}
	return out
}

func clusterLess(a, b *fleet.Cluster) bool {
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
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
