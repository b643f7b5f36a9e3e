package heartbeat

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/scheme"
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
			if s.Display.ReadyNodes != tc.readyNodes || s.Display.SampleNode != tc.samp {
				t.Errorf("display %+v", s.Display)
			}
			if s.Agent.ReadyNodes != tc.ready || s.Agent.NonReadyNodes != tc.notReady || !s.Agent.LastSeen.Time.Equal(now) || s.Agent.Namespace != "ns" {
				t.Errorf("agent %+v", s.Agent)
			}
			// The patch spells out zeros, so that a count that fell to
			// zero is written, and has the RFC 3339 time.
			patch, err := s.MergePatch()
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				Status struct {
					Agent map[string]any `json:"agent"`
				} `json:"status"`
			}
			if err := json.Unmarshal(patch, &got); err != nil {
				t.Fatal(err)
			}
			if _, ok := got.Status.Agent["nonReadyNodes"]; !ok || got.Status.Agent["lastSeen"] != "2026-01-02T03:04:05Z" {
				t.Errorf("patch %s", patch)
			}
		})
	}
	many := []corev1.Node{}
	for _, n := range []string{"e", "d", "c", "b", "a"} {
		many = append(many, node(n, corev1.ConditionTrue))
	}
	names := Status(many, "", now).Agent.ReadyNodeNames
	if len(names) != 3 || names[0] != "a" {
		t.Errorf("readyNodeNames %v, want the first three sorted", names)
	}
}

// TestReportRoute: a check-in goes to the content API while it takes them;
// a content API that is not served (404) or not allowed (403) is not asked
// again and the Cluster is patched instead; a manager that is away (503)
// is an error to retry, not a reason to patch the Cluster (an agent
// registered for the content API may not).
func TestReportRoute(t *testing.T) {
	for _, tc := range []struct {
		name        string
		code        int
		wantErr     bool
		wantPatched bool
		wantAsked   int // content API calls over two reports
	}{
		{name: "taken", code: http.StatusOK, wantAsked: 2},
		{name: "not served", code: http.StatusNotFound, wantPatched: true, wantAsked: 1},
		{name: "not allowed", code: http.StatusForbidden, wantPatched: true, wantAsked: 1},
		{name: "manager away", code: http.StatusServiceUnavailable, wantErr: true, wantAsked: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				asked++
				if r.Method != http.MethodPut || r.URL.Path != contentapi.ClusterStatusPath("cluster-ns", "c1") {
					t.Errorf("%s %s", r.Method, r.URL.Path)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.code)
				if tc.code == http.StatusOK {
					_, _ = w.Write([]byte(`{}`))
					return
				}
				_, _ = fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":%d,"reason":%q}`, tc.code, reasonOf(tc.code))
			}))
			defer srv.Close()
			content, err := contentapi.NewRESTClient(&rest.Config{Host: srv.URL}, nil)
			if err != nil {
				t.Fatal(err)
			}
			cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "c1"}}
			up := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(cluster).WithStatusSubresource(cluster).Build()
			down := fake.NewClientBuilder().Build()
			h := New(Options{Upstream: up, Downstream: down, Content: content, Workspace: "ws", ClusterName: "c1", ClusterNamespace: "cluster-ns", AgentNamespace: "agent-ns"})
			for range 2 {
				err = h.Report(context.Background())
			}
			if (err != nil) != tc.wantErr {
				t.Errorf("Report: %v, want error %v", err, tc.wantErr)
			}
			got := &fleet.Cluster{}
			if err := up.Get(context.Background(), client.ObjectKeyFromObject(cluster), got); err != nil {
				t.Fatal(err)
			}
			if patched := !got.Status.Agent.LastSeen.IsZero(); patched != tc.wantPatched {
				t.Errorf("Cluster patched by the agent: %v, want %v", patched, tc.wantPatched)
			}
			if asked != tc.wantAsked {
				t.Errorf("content API asked %d times, want %d", asked, tc.wantAsked)
			}
		})
	}
}

func reasonOf(code int) metav1.StatusReason {
	switch code {
	case http.StatusNotFound:
		return metav1.StatusReasonNotFound
	case http.StatusForbidden:
		return metav1.StatusReasonForbidden
	}
	return metav1.StatusReasonServiceUnavailable
}
