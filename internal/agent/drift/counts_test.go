package drift

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// Each desired object is counted in exactly one bucket of resourceCounts,
// so the buckets add up to desiredReady: Missing, else Modified (ready or
// not), else NotReady, else Ready.
func TestEvaluateCountsEachObjectOnce(t *testing.T) {
	cm := func(name, value string) *unstructured.Unstructured {
		return obj(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: "+name+", namespace: ns}\ndata: {a: \""+value+"\"}\n")
	}
	deploy := func(name, image string) *unstructured.Unstructured {
		d := obj(t, strings.ReplaceAll(liveDeploy, "img:1", image))
		d.SetName(name)
		return d
	}
	desiredDeploy := func(name string) *unstructured.Unstructured {
		d := obj(t, desiredDeploy)
		d.SetName(name)
		return d
	}
	type pair struct{ desired, live *unstructured.Unstructured }
	tests := []struct {
		name     string
		objs     []pair
		want     fleet.ResourceCounts
		nonReady int
	}{
		{name: "ready", objs: []pair{{cm("a", "1"), cm("a", "1")}},
			want: fleet.ResourceCounts{DesiredReady: 1, Ready: 1}},
		{name: "modified and ready", objs: []pair{{cm("a", "1"), cm("a", "2")}},
			want: fleet.ResourceCounts{DesiredReady: 1, Modified: 1}},
		{name: "not ready", objs: []pair{{desiredDeploy("d"), deploy("d", "img:1")}},
			want: fleet.ResourceCounts{DesiredReady: 1, NotReady: 1}, nonReady: 1},
		{name: "modified and not ready", objs: []pair{{desiredDeploy("d"), deploy("d", "img:2")}},
			want: fleet.ResourceCounts{DesiredReady: 1, Modified: 1}, nonReady: 1},
		{name: "missing", objs: []pair{{cm("a", "1"), nil}},
			want: fleet.ResourceCounts{DesiredReady: 1, Missing: 1}},
		{name: "mixed", objs: []pair{
			{cm("a", "1"), cm("a", "1")}, {cm("b", "1"), cm("b", "9")}, {cm("c", "1"), nil},
			{desiredDeploy("d"), deploy("d", "img:1")}, {desiredDeploy("e"), deploy("e", "img:2")},
		}, want: fleet.ResourceCounts{DesiredReady: 5, Ready: 1, Modified: 2, Missing: 1, NotReady: 1}, nonReady: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var desired []*unstructured.Unstructured
			live := map[string]*unstructured.Unstructured{}
			for _, p := range tt.objs {
				desired = append(desired, p.desired)
				live[p.desired.GetName()] = p.live
			}
			res, err := Evaluate(desired, func(d *unstructured.Unstructured) (*unstructured.Unstructured, error) {
				return live[d.GetName()], nil
			}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Counts != tt.want {
				t.Errorf("counts %+v, want %+v", res.Counts, tt.want)
			}
			c := res.Counts
			if sum := c.Ready + c.Modified + c.NotReady + c.Missing + c.Orphaned + c.WaitApplied + c.Unknown; sum != c.DesiredReady {
				t.Errorf("buckets add up to %d, desiredReady %d", sum, c.DesiredReady)
			}
			if len(res.NonReady) != tt.nonReady {
				t.Errorf("nonReadyStatus %+v, want %d entries", res.NonReady, tt.nonReady)
			}
		})
	}
}
