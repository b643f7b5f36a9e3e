package v1alpha1_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// rancherSchedule is the second example of Rancher Fleet's scheduling
// documentation, with a ClusterGroup target added.
const rancherSchedule = `
apiVersion: fleet.cattle.io/v1alpha1
kind: Schedule
metadata:
  name: schedule-test
spec:
  schedule: "0 0 */3 * * *"
  duration: 1h
  location: Europe/Madrid
  targets:
    clusters:
      - name: targets-dev
        clusterSelector:
          matchLabels:
            env: dev
      - name: local
        clusterName: local
        clusterGroup: null
      - name: group
        clusterGroup: edge
        clusterGroupSelector:
          matchLabels:
            tier: gold
`

// TestRancherScheduleApplies: a Schedule manifest of Rancher Fleet applies
// unchanged and reads back field for field; its status subresource holds
// what the controller writes.
func TestRancherScheduleApplies(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c := upstream.Client
	n := ns(t, c, "schedule")
	u := &unstructured.Unstructured{}
	g.Expect(yaml.Unmarshal([]byte(rancherSchedule), &u.Object)).To(Succeed())
	u.SetNamespace(n)
	g.Expect(c.Create(ctx, u)).To(Succeed())

	s := &fleet.Schedule{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: n, Name: "schedule-test"}, s)).To(Succeed())
	g.Expect(s.Spec).To(Equal(fleet.ScheduleSpec{
		Schedule: "0 0 */3 * * *", Duration: metav1.Duration{Duration: time.Hour}, Location: "Europe/Madrid",
		Targets: fleet.ScheduleTargets{Clusters: []fleet.ScheduleTarget{
			{Name: "targets-dev", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}},
			{Name: "local", ClusterName: "local"},
			{Name: "group", ClusterGroup: "edge", ClusterGroupSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}},
		}},
	}))

	next := metav1.NewTime(time.Date(2030, 6, 15, 12, 0, 0, 0, time.UTC))
	s.Status = fleet.ScheduleStatus{Active: true, NextStartTime: next, MatchingClusters: []string{"a", "b"},
		Conditions: []fleet.ScheduleCondition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Valid", LastTransitionTime: next}}}
	g.Expect(c.Status().Update(ctx, s)).To(Succeed())
	got := &fleet.Schedule{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(s), got)).To(Succeed())
	g.Expect(got.Status).To(Equal(s.Status))
}

// TestScheduleDurationValidation: spec.duration takes Go durations only
// (Rancher Fleet's CEL rule), up to 2562047h.
func TestScheduleDurationValidation(t *testing.T) {
	ctx := context.Background()
	c := upstream.Client
	n := ns(t, c, "schedule-duration")
	raw := func(name, d string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "fleet.cattle.io/v1alpha1", "kind": "Schedule",
			"metadata": map[string]any{"name": name, "namespace": n},
			"spec":     map[string]any{"schedule": "0 0 22 * * *", "duration": d},
		}}
	}
	for i, d := range []string{"1d", "2w", "an hour", "2562048h", "-1h", ""} {
		t.Run("refused "+d, func(t *testing.T) {
			g := NewWithT(t)
			err := c.Create(ctx, raw(fmt.Sprintf("bad-%d", i), d))
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			g.Expect(err.Error()).To(ContainSubstring("spec.duration"))
		})
	}
	for i, d := range []string{"0", "0s", "90m", "1h30m", "1.5h", "2562047h", "500ms"} {
		g := NewWithT(t)
		g.Expect(c.Create(ctx, raw(fmt.Sprintf("ok-%d", i), d))).To(Succeed(), d)
	}
}
