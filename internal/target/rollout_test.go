package target

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

func TestLimit(t *testing.T) {
	i := func(v int) *intstr.IntOrString { x := intstr.FromInt32(int32(v)); return &x }
	s := func(v string) *intstr.IntOrString { x := intstr.FromString(v); return &x }
	cases := []struct {
		name  string
		count int
		vals  []*intstr.IntOrString
		want  int
		err   bool
	}{
		{"nil is count", 10, nil, 10, false},
		{"count 0 gives 1", 0, []*intstr.IntOrString{i(5)}, 1, false},
		{"int", 10, []*intstr.IntOrString{i(3)}, 3, false},
		{"int above count", 10, []*intstr.IntOrString{i(30)}, 10, false},
		{"int below 0", 10, []*intstr.IntOrString{i(-1)}, 0, false},
		{"percent floored", 10, []*intstr.IntOrString{s("25%")}, 2, false},
		{"percent rounds up to 1", 3, []*intstr.IntOrString{s("10%")}, 1, false},
		{"zero percent is 1", 10, []*intstr.IntOrString{s("0%")}, 1, false},
		{"100 percent", 7, []*intstr.IntOrString{s("100%")}, 7, false},
		{"first non-nil wins", 10, []*intstr.IntOrString{nil, s("50%"), i(1)}, 5, false},
		{"invalid string", 10, []*intstr.IntOrString{s("lots")}, 0, true},
		// Rancher Fleet's string forms: a quoted count, a fractional or
		// above-100 percentage.
		{"quoted count", 10, []*intstr.IntOrString{s("3")}, 3, false},
		{"quoted count above count", 10, []*intstr.IntOrString{s("30")}, 10, false},
		{"quoted zero", 10, []*intstr.IntOrString{s("0")}, 0, false},
		{"quoted negative", 10, []*intstr.IntOrString{s("-2")}, 0, false},
		{"fractional percent floored", 10, []*intstr.IntOrString{s("12.5%")}, 1, false},
		{"fractional percent", 40, []*intstr.IntOrString{s("12.5%")}, 5, false},
		{"fractional percent rounds up to 1", 3, []*intstr.IntOrString{s("0.5%")}, 1, false},
		{"percent above 100 capped", 10, []*intstr.IntOrString{s("150%")}, 10, false},
		{"huge percent capped", 10, []*intstr.IntOrString{s("1e300%")}, 10, false},
		{"space before percent", 10, []*intstr.IntOrString{s("10 %")}, 0, true},
		{"bare percent", 10, []*intstr.IntOrString{s("%")}, 0, true},
		{"NaN percent", 10, []*intstr.IntOrString{s("NaN%")}, 0, true},
		{"Inf percent", 10, []*intstr.IntOrString{s("Inf%")}, 0, true},
		{"fractional count", 10, []*intstr.IntOrString{s("2.5")}, 0, true},
		{"empty string", 10, []*intstr.IntOrString{s("")}, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Limit(c.count, c.vals...)
			if (err != nil) != c.err || got != c.want {
				t.Fatalf("got %d, %v; want %d, err=%v", got, err, c.want, c.err)
			}
		})
	}
}

// world is a rollout scenario: n clusters, each with a deployment that is
// (unless absent) fully applied and ready at version "old".
type world struct {
	b     *fleet.Bundle
	plans []*Plan
}

func newWorld(n int, rs *fleet.RolloutStrategy, existing bool) *world {
	w := &world{b: &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ws"}}}
	w.b.Spec.RolloutStrategy = rs
	for i := 0; i < n; i++ {
		c := cluster(fmt.Sprintf("c%03d", i), withLabels("half", fmt.Sprint(i*2/n)))
		p := &Plan{Target: &Target{Cluster: c, Info: ClusterInfo{Cluster: c}, DeploymentID: "new"}}
		if existing {
			p.Deployment = &fleet.BundleDeployment{
				Spec:   fleet.BundleDeploymentSpec{DeploymentID: "old", StagedDeploymentID: "old"},
				Status: fleet.BundleDeploymentStatus{AppliedDeploymentID: "old", Ready: true, NonModified: true},
			}
		}
		w.plans = append(w.plans, p)
	}
	return w
}

func (w *world) run(t *testing.T) *Result {
	t.Helper()
	res, err := Rollout(w.b, w.plans, func(*Target) *fleet.BundleDeployment { return &fleet.BundleDeployment{} })
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// agents applies every promoted version, ready unless the cluster is in stuck.
func (w *world) agents(stuck map[string]bool) {
	for _, p := range w.plans {
		if p.Deployment == nil || p.Target.Offline {
			continue
		}
		p.Deployment.Status.AppliedDeploymentID = p.Deployment.Spec.DeploymentID
		p.Deployment.Status.Ready = !stuck[p.Target.Cluster.Name]
	}
}

func (w *world) promoted() (n int) {
	for _, p := range w.plans {
		if p.Deployment != nil && p.Deployment.Spec.DeploymentID == "new" {
			n++
		}
	}
	return n
}

func TestRolloutMaxUnavailable(t *testing.T) {
	three := intstr.FromInt32(3)
	w := newWorld(10, &fleet.RolloutStrategy{MaxUnavailable: &three}, true)
	res := w.run(t)
	if w.promoted() != 3 || res.Unavailable != 3 || res.MaxUnavailable != 3 {
		t.Fatalf("first pass promoted %d, unavailable %d", w.promoted(), res.Unavailable)
	}
	for _, p := range w.plans {
		if p.Deployment.Spec.StagedDeploymentID != "new" {
			t.Fatal("not every target staged")
		}
	}
	// No agent progress: a second pass promotes nothing more.
	w.run(t)
	if w.promoted() != 3 {
		t.Fatalf("promoted %d without progress", w.promoted())
	}
	// Agents apply: three more each pass.
	w.agents(nil)
	w.run(t)
	if w.promoted() != 6 {
		t.Fatalf("promoted %d, want 6", w.promoted())
	}
	// Two of them get stuck: only one more fits in the budget, then it halts.
	w.agents(map[string]bool{"c003": true, "c004": true})
	w.run(t)
	if w.promoted() != 7 {
		t.Fatalf("promoted %d, want 7", w.promoted())
	}
	w.agents(map[string]bool{"c003": true, "c004": true, "c006": true})
	w.run(t)
	if w.promoted() != 7 {
		t.Fatalf("rollout did not halt at maxUnavailable: %d", w.promoted())
	}
}

func TestRolloutOfflineDoesNotBlock(t *testing.T) {
	one := intstr.FromInt32(1)
	w := newWorld(6, &fleet.RolloutStrategy{MaxUnavailable: &one}, true)
	w.plans[0].Target.Offline = true
	w.plans[3].Target.Offline = true
	for i := 0; i < 10; i++ {
		w.run(t)
		w.agents(nil)
	}
	res := w.run(t)
	if w.promoted() != 6 || res.Unavailable != 0 {
		t.Fatalf("promoted %d (want all 6, offline ones included), unavailable %d", w.promoted(), res.Unavailable)
	}
	if w.plans[0].Deployment.Status.AppliedDeploymentID != "old" {
		t.Fatal("offline cluster applied")
	}
	// Fleet's behaviour without the offline rule: the offline cluster
	// would count as unavailable and stop everything after it.
	w2 := newWorld(6, &fleet.RolloutStrategy{MaxUnavailable: &one}, true)
	for i := 0; i < 10; i++ {
		w2.run(t)
		w2.agents(map[string]bool{"c000": true})
	}
	if w2.promoted() != 1 {
		t.Fatalf("control: a stuck online cluster should block, promoted %d", w2.promoted())
	}
}

func TestRolloutPaused(t *testing.T) {
	w := newWorld(4, nil, true)
	w.plans[1].Target.Paused = true
	w.run(t)
	if w.promoted() != 3 || w.plans[1].Deployment.Spec.StagedDeploymentID != "new" {
		t.Fatalf("paused target promoted or not staged: %d", w.promoted())
	}
}

func TestRolloutMaxNew(t *testing.T) {
	two := 2
	w := newWorld(5, &fleet.RolloutStrategy{MaxNew: &two}, false)
	res := w.run(t)
	created := 0
	for _, p := range w.plans {
		if p.Create {
			created++
		}
	}
	if created != 2 || res.NewlyCreated != 2 || res.MaxNew != 2 {
		t.Fatalf("created %d", created)
	}
}

func TestAutoPartitions(t *testing.T) {
	cases := []struct {
		name  string
		n     int
		rs    *fleet.RolloutStrategy
		parts []string
	}{
		{"below threshold", 199, nil, []string{"All"}},
		{"at threshold 25%", 200, nil, []string{"Partition 0 - 50", "Partition 50 - 100", "Partition 100 - 150", "Partition 150 - 200"}},
		{"custom size and threshold", 5, &fleet.RolloutStrategy{AutoPartitionThreshold: ptr(3), AutoPartitionSize: ptrIS(intstr.FromInt32(2))}, []string{"Partition 0 - 2", "Partition 2 - 4", "Partition 4 - 5"}},
		{"threshold 0 disables", 500, &fleet.RolloutStrategy{AutoPartitionThreshold: ptr(0)}, []string{"All"}},
		{"quoted size", 5, &fleet.RolloutStrategy{AutoPartitionThreshold: ptr(3), AutoPartitionSize: ptrIS(intstr.FromString("2"))}, []string{"Partition 0 - 2", "Partition 2 - 4", "Partition 4 - 5"}},
		{"fractional percent size", 5, &fleet.RolloutStrategy{AutoPartitionThreshold: ptr(3), AutoPartitionSize: ptrIS(intstr.FromString("50.5%"))}, []string{"Partition 0 - 2", "Partition 2 - 4", "Partition 4 - 5"}},
		{"quoted size 0 disables", 5, &fleet.RolloutStrategy{AutoPartitionThreshold: ptr(3), AutoPartitionSize: ptrIS(intstr.FromString("0"))}, []string{"All"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(c.n, c.rs, false)
			res := w.run(t)
			var names []string
			for _, p := range res.Partitions {
				names = append(names, p.Name)
			}
			if fmt.Sprint(names) != fmt.Sprint(c.parts) {
				t.Fatalf("got %v", names)
			}
		})
	}
}

func ptr(i int) *int                                 { return &i }
func ptrIS(v intstr.IntOrString) *intstr.IntOrString { return &v }

// Manual partitions: the second half waits until the first is rolled out.
func TestManualPartitions(t *testing.T) {
	rs := &fleet.RolloutStrategy{Partitions: []fleet.Partition{
		{Name: "first", ClusterSelector: sel("half", "0"), MaxUnavailable: ptrIS(intstr.FromInt32(2))},
		{Name: "second", ClusterSelector: sel("half", "1"), MaxUnavailable: ptrIS(intstr.FromInt32(2))},
	}}
	w := newWorld(10, rs, true)
	inSecond := func() (n int) {
		for _, p := range w.plans[5:] {
			if p.Deployment.Spec.DeploymentID == "new" {
				n++
			}
		}
		return n
	}
	res := w.run(t)
	if w.promoted() != 2 || inSecond() != 0 || res.UnavailablePartitions != 1 {
		t.Fatalf("pass 1: promoted %d, second %d, unavailable partitions %d", w.promoted(), inSecond(), res.UnavailablePartitions)
	}
	w.agents(nil)
	w.run(t)
	if w.promoted() != 4 || inSecond() != 0 {
		t.Fatalf("pass 2: promoted %d, second %d", w.promoted(), inSecond())
	}
	w.agents(nil)
	// The last one of the first partition fits, and with only one not up
	// to date the first partition is available: the second starts.
	w.run(t)
	if w.promoted() != 7 || inSecond() != 2 {
		t.Fatalf("pass 3: promoted %d, second %d", w.promoted(), inSecond())
	}
	for i := 0; i < 5; i++ {
		w.agents(nil)
		w.run(t)
	}
	if w.promoted() != 10 {
		t.Fatalf("not finished: %d", w.promoted())
	}
	// A cluster in no partition is not rolled out.
	w3 := newWorld(4, &fleet.RolloutStrategy{Partitions: []fleet.Partition{{ClusterName: "c000"}}}, true)
	w3.run(t)
	if w3.promoted() != 1 || w3.plans[1].Deployment.Spec.StagedDeploymentID != "old" {
		t.Fatalf("targets outside partitions touched")
	}
}

// maxUnavailablePartitions lets the next partition start while one is
// still unavailable.
func TestMaxUnavailablePartitions(t *testing.T) {
	rs := &fleet.RolloutStrategy{
		MaxUnavailablePartitions: ptrIS(intstr.FromInt32(1)),
		Partitions: []fleet.Partition{
			{Name: "a", ClusterSelector: sel("half", "0"), MaxUnavailable: ptrIS(intstr.FromInt32(1))},
			{Name: "b", ClusterSelector: sel("half", "1"), MaxUnavailable: ptrIS(intstr.FromInt32(1))},
		},
	}
	w := newWorld(4, rs, true)
	res := w.run(t)
	if w.promoted() != 2 || res.UnavailablePartitions != 2 {
		t.Fatalf("promoted %d, unavailable partitions %d", w.promoted(), res.UnavailablePartitions)
	}
}
