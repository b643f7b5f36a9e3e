package heartbeat

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func node(name string, ready corev1.ConditionStatus) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if ready != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
	}
	return n
}

func TestStatus(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name             string
		nodes            []corev1.Node
		readyNodes, samp string
		ready, notReady  int
	}{
		{name: "none", readyNodes: "0/0"},
		{name: "mixed", nodes: []corev1.Node{node("z", corev1.ConditionTrue), node("b", corev1.ConditionFalse), node("a", corev1.ConditionTrue), node("c", "")},
			readyNodes: "2/4", samp: "a", ready: 2, notReady: 2},
		{name: "none ready", nodes: []corev1.Node{node("y", corev1.ConditionUnknown), node("x", corev1.ConditionFalse)},
			readyNodes: "0/2", samp: "x", notReady: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Status(tc.nodes, "ns", now)
			agent := s["agent"].(map[string]any)
			display := s["display"].(map[string]any)
			if display["readyNodes"] != tc.readyNodes || display["sampleNode"] != tc.samp {
				t.Errorf("display %v", display)
			}
			if agent["readyNodes"] != tc.ready || agent["nonReadyNodes"] != tc.notReady || agent["lastSeen"] != "2026-01-02T03:04:05Z" || agent["namespace"] != "ns" {
				t.Errorf("agent %v", agent)
			}
		})
	}
	many := []corev1.Node{}
	for _, n := range []string{"e", "d", "c", "b", "a"} {
		many = append(many, node(n, corev1.ConditionTrue))
	}
	names := Status(many, "", now)["agent"].(map[string]any)["readyNodeNames"].([]string)
	if len(names) != 3 || names[0] != "a" {
		t.Errorf("readyNodeNames %v, want the first three sorted", names)
	}
}
