package target

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/intstr"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// Rollout defaults, as in Fleet.
var (
	DefaultMaxUnavailable           = intstr.FromString("100%")
	DefaultMaxUnavailablePartitions = intstr.FromInt32(0)
	DefaultAutoPartitionSize        = intstr.FromString("25%")
)

const (
	DefaultAutoPartitionThreshold = 200
	DefaultMaxNew                 = 50
	// AllPartition names the single partition of a small rollout.
	AllPartition = "All"
)

// Limit turns an absolute or percentage value into a count out of count,
// with Fleet's rounding: percentages are floored but at least 1, absolute
// counts are clamped to [0, count], and an empty set gives 1. The first
// non-nil value wins.
//
// Strings are read as Rancher Fleet reads them, so that fleet.yaml files
// written for it keep working: a string without "%" (maxUnavailable: "10")
// is an absolute count, and a percentage may be fractional ("12.5%") or
// above 100% (capped at count).
func Limit(count int, vals ...*intstr.IntOrString) (int, error) {
	if count <= 0 {
		return 1, nil
	}
	var v *intstr.IntOrString
	for _, x := range vals {
		if x != nil {
			v = x
			break
		}
	}
	if v == nil {
		return count, nil
	}
	if v.Type == intstr.Int {
		return clampCount(v.IntValue(), count), nil
	}
	pct, isPct := strings.CutSuffix(v.StrVal, "%")
	if !isPct {
		i, err := strconv.Atoi(v.StrVal)
		if err != nil {
			return 0, invalidLimit(v.StrVal)
		}
		return clampCount(i, count), nil
	}
	return percentOf(pct, v.StrVal, count)
}

// clampCount applies Fleet's rule for absolute counts: above count becomes
// count, below 0 becomes 0.
func clampCount(i, count int) int {
	return max(0, min(i, count))
}

// percentOf floors count*pct/100 as Rancher Fleet does (parsing pct as a
// float, so "12.5" works), with a result of at least 1 and at most count:
// above 100% is all of count.
func percentOf(pct, raw string, count int) (int, error) {
	f, err := strconv.ParseFloat(pct, 64)
	// ParseFloat also takes "NaN" and "Inf", which are no percentage and
	// have no integer value.
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, invalidLimit(raw)
	}
	// Capping first keeps huge values ("1e300%") from overflowing int.
	f = max(0, min(f, 100))
	return max(1, int(float64(count)*f)/100), nil
}

func invalidLimit(s string) error {
	return fmt.Errorf("invalid value %q: want an integer count like \"10\" or a percentage like \"25%%\"", s)
}

// Plan is one target and the BundleDeployment to write for it.
type Plan struct {
	Target *Target
	// Deployment is a copy of the existing BundleDeployment, or a new one
	// when Create is set, or nil when creation waits for a later pass
	// (maxNew). Rollout edits its staged and current options in place.
	Deployment *fleet.BundleDeployment
	Create     bool
}

// IsUnavailable is Fleet's rule: the applied version is not the current one
// or the deployment is not ready. Deployments of offline clusters are never
// unavailable: an unreachable cluster must not hold the rollout hostage.
func (p *Plan) IsUnavailable() bool {
	if p.Deployment == nil || p.Target.Offline {
		return false
	}
	return isUnavailable(p.Deployment)
}

func isUnavailable(bd *fleet.BundleDeployment) bool {
	return bd.Status.AppliedDeploymentID != bd.Spec.DeploymentID || !bd.Status.Ready
}

// upToDate reports whether the desired version is staged, current and
// applied.
func (p *Plan) upToDate() bool {
	bd := p.Deployment
	id := p.Target.DeploymentID
	return bd != nil && bd.Spec.StagedDeploymentID == id && bd.Spec.DeploymentID == id && bd.Status.AppliedDeploymentID == id
}

// partitionUnavailable is the partition rule: not up to date or not ready.
func (p *Plan) partitionUnavailable() bool {
	if p.Target.Offline {
		return false
	}
	return !p.upToDate() || p.IsUnavailable()
}

// Partition is one step of a rollout.
type Partition struct {
	Name           string
	MaxUnavailable int
	Unavailable    int
	Plans          []*Plan
}

// Result is the rollout state, written to the Bundle status.
type Result struct {
	MaxUnavailable           int
	MaxUnavailablePartitions int
	MaxNew                   int
	Unavailable              int
	UnavailablePartitions    int
	NewlyCreated             int
	Partitions               []*Partition
}

// NewDeployment builds the shell of a BundleDeployment for a target.
type NewDeployment func(*Target) *fleet.BundleDeployment

// Rollout stages every target's desired version and promotes it to current
// where the rollout strategy allows, partition by partition. It edits the
// plans' Deployments in place and returns the rollout status.
func Rollout(b *fleet.Bundle, plans []*Plan, newBD NewDeployment) (*Result, error) {
	rs := b.Spec.RolloutStrategy
	if rs == nil {
		rs = &fleet.RolloutStrategy{}
	}
	parts, err := partitions(b, rs, plans)
	if err != nil {
		return nil, err
	}
	res := &Result{Partitions: parts, MaxNew: DefaultMaxNew}
	if rs.MaxNew != nil && *rs.MaxNew > 0 {
		res.MaxNew = *rs.MaxNew
	}
	maxUnavailable := rs.MaxUnavailable
	if maxUnavailable == nil {
		maxUnavailable = &DefaultMaxUnavailable
	}
	if res.MaxUnavailable, err = Limit(len(plans), maxUnavailable); err != nil {
		return nil, fmt.Errorf("rolloutStrategy.maxUnavailable: %w", err)
	}
	mup := rs.MaxUnavailablePartitions
	if mup == nil {
		mup = &DefaultMaxUnavailablePartitions
	}
	if res.MaxUnavailablePartitions, err = Limit(len(parts), mup); err != nil {
		return nil, fmt.Errorf("rolloutStrategy.maxUnavailablePartitions: %w", err)
	}
	for i, part := range parts {
		var pmu *intstr.IntOrString
		if len(rs.Partitions) > 0 {
			pmu = rs.Partitions[i].MaxUnavailable
		}
		if part.MaxUnavailable, err = Limit(len(part.Plans), pmu, maxUnavailable); err != nil {
			return nil, fmt.Errorf("partition %s maxUnavailable: %w", part.Name, err)
		}
	}

	// Stage: create up to maxNew new deployments and record the desired
	// version on every deployment.
	for _, part := range parts {
		for _, p := range part.Plans {
			if p.Deployment == nil && res.NewlyCreated < res.MaxNew {
				res.NewlyCreated++
				p.Deployment = newBD(p.Target)
				p.Create = true
			}
			if p.Deployment != nil {
				p.Deployment.Spec.StagedOptions = p.Target.Options
				p.Deployment.Spec.StagedDeploymentID = p.Target.DeploymentID
			}
		}
	}
	seen := map[*Plan]bool{}
	for _, part := range parts {
		for _, p := range part.Plans {
			if !seen[p] && p.IsUnavailable() {
				res.Unavailable++
			}
			seen[p] = true
			if p.IsUnavailable() {
				part.Unavailable++
			}
		}
	}

	// Promote, partition by partition, within the unavailability budgets.
	for _, part := range parts {
		for _, p := range part.Plans {
			promote(res, part, p)
		}
		part.Unavailable = 0
		for _, p := range part.Plans {
			if p.partitionUnavailable() {
				part.Unavailable++
			}
		}
		if part.Unavailable > part.MaxUnavailable {
			res.UnavailablePartitions++
		}
		if res.UnavailablePartitions > res.MaxUnavailablePartitions {
			break
		}
	}
	return res, nil
}

func promote(res *Result, part *Partition, p *Plan) {
	bd := p.Deployment
	if bd == nil || p.Target.Paused {
		return
	}
	if bd.Spec.DeploymentID == bd.Spec.StagedDeploymentID {
		// Nothing new; keep options in sync (diff settings are not part
		// of the ID, so they can differ while the ID does not).
		bd.Spec.Options = bd.Spec.StagedOptions
		return
	}
	unavailable := p.IsUnavailable()
	if p.Target.Offline || unavailable ||
		(res.Unavailable < res.MaxUnavailable && part.Unavailable < part.MaxUnavailable) {
		if !unavailable && !p.Target.Offline {
			res.Unavailable++
			part.Unavailable++
		}
		bd.Spec.Options = bd.Spec.StagedOptions
		bd.Spec.DeploymentID = bd.Spec.StagedDeploymentID
	}
}

// partitions groups the plans: manual partitions when the strategy has any
// (a target can be in several, and one in none is not rolled out), else a
// single "All" partition below the auto-partition threshold, else chunks of
// autoPartitionSize.
func partitions(b *fleet.Bundle, rs *fleet.RolloutStrategy, plans []*Plan) ([]*Partition, error) {
	if len(rs.Partitions) > 0 {
		bm, err := NewBundleMatcher(b)
		if err != nil {
			return nil, err
		}
		parts := make([]*Partition, len(rs.Partitions))
		for i, p := range rs.Partitions {
			name := p.Name
			if name == "" {
				name = fmt.Sprintf("partition%03d", i)
			}
			parts[i] = &Partition{Name: name}
		}
		for _, p := range plans {
			for _, i := range bm.Partitions(p.Target.Info) {
				parts[i].Plans = append(parts[i].Plans, p)
			}
		}
		return parts, nil
	}
	threshold := DefaultAutoPartitionThreshold
	if rs.AutoPartitionThreshold != nil {
		threshold = *rs.AutoPartitionThreshold
	}
	size := rs.AutoPartitionSize
	if size == nil {
		size = &DefaultAutoPartitionSize
	}
	if len(plans) < threshold || threshold <= 0 || (size.Type == intstr.Int && size.IntValue() <= 0) {
		return []*Partition{{Name: AllPartition, Plans: plans}}, nil
	}
	n, err := Limit(len(plans), size)
	if err != nil {
		return nil, fmt.Errorf("rolloutStrategy.autoPartitionSize: %w", err)
	}
	// A quoted count of "0" disables auto-partitioning as an int 0 does
	// (and chunks of 0 would never end).
	if n <= 0 {
		return []*Partition{{Name: AllPartition, Plans: plans}}, nil
	}
	sorted := append([]*Plan(nil), plans...)
	sort.SliceStable(sorted, func(i, j int) bool { return KeyLess(sorted[i].Target, sorted[j].Target) })
	var parts []*Partition
	for off := 0; off < len(sorted); off += n {
		end := min(off+n, len(sorted))
		// Fleet's names give the end exclusively ("Partition 0 - 50",
		// "Partition 50 - 100"); they are shown in the Bundle status.
		parts = append(parts, &Partition{Name: fmt.Sprintf("Partition %d - %d", off, end), Plans: sorted[off:end]})
	}
	return parts, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
