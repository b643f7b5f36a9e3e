package heartbeat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

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
// again once patching the Cluster worked instead; when the patch is
// refused too (an agent registered for the content API, against an API
// server whose aggregation layer has not caught up after a restart) the
// content API is asked again next time and its answer returned, not a 403
// that would count as a refused credential (until that has gone on too
// long to be a restart); a manager that is away (503)
// is an error to retry, never a reason to patch the Cluster. A 401 from the
// content API (a manager that cannot authenticate the aggregation layer
// yet) is tried by the patch too: only the API server's own 401 there is a
// refused credential; the manager's alone is a failure to retry, however
// often, and the content API is asked again next time.
func TestReportRoute(t *testing.T) {
	notRefused := func(err error) bool {
		return err != nil && !apierrors.IsUnauthorized(err) && !apierrors.IsForbidden(err)
	}
	for _, tc := range []struct {
		name         string
		code         int
		patchRefused bool
		patchErr     error // the patch's error when patchRefused (default 403)
		wantErr      func(error) bool
		wantPatched  bool
		reports      int // default 2
		wantAsked    int // content API calls over all reports
	}{
		{name: "taken", code: http.StatusOK, wantAsked: 2},
		{name: "not served", code: http.StatusNotFound, wantPatched: true, wantAsked: 1},
		{name: "not allowed", code: http.StatusForbidden, wantPatched: true, wantAsked: 1},
		{name: "not served, and no grant to patch", code: http.StatusNotFound, patchRefused: true, wantErr: apierrors.IsNotFound, wantAsked: 2},
		{name: "not served for good, and no grant to patch: the refusal counts", code: http.StatusNotFound, patchRefused: true, reports: refusedBothLimit + 1, wantErr: apierrors.IsForbidden, wantAsked: refusedBothLimit + 1},
		{name: "manager away", code: http.StatusServiceUnavailable, wantErr: apierrors.IsServiceUnavailable, wantAsked: 2},
		{name: "manager cannot authenticate the aggregation layer: patched", code: http.StatusUnauthorized, wantPatched: true, wantAsked: 2},
		{name: "manager cannot authenticate the aggregation layer, and no grant to patch: never a refusal", code: http.StatusUnauthorized,
			patchRefused: true, reports: refusedBothLimit + 2, wantErr: notRefused, wantAsked: refusedBothLimit + 2},
		{name: "credential revoked: the API server refuses the patch too", code: http.StatusUnauthorized, patchRefused: true,
			patchErr: apierrors.NewUnauthorized("invalid bearer token"), wantErr: apierrors.IsUnauthorized, wantAsked: 2},
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
			b := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(cluster).WithStatusSubresource(cluster)
			if tc.patchRefused {
				patchErr := tc.patchErr
				if patchErr == nil {
					patchErr = apierrors.NewForbidden(schema.GroupResource{Group: "fleet.cattle.io", Resource: "clusters"}, "c1", errors.New("no grant"))
				}
				b = b.WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
					return patchErr
				}})
			}
			up := b.Build()
			down := fake.NewClientBuilder().Build()
			h := New(Options{Upstream: up, Downstream: down, Content: content, Workspace: "ws", ClusterName: "c1", ClusterNamespace: "cluster-ns", AgentNamespace: "agent-ns"})
			reports := tc.reports
			if reports == 0 {
				reports = 2
			}
			for range reports {
				err = h.Report(context.Background())
			}
			switch {
			case tc.wantErr == nil && err != nil:
				t.Errorf("Report: %v, want success", err)
			case tc.wantErr != nil && !tc.wantErr(err):
				t.Errorf("Report: %v, want another error", err)
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
	case http.StatusUnauthorized:
		return metav1.StatusReasonUnauthorized
	case http.StatusNotFound:
		return metav1.StatusReasonNotFound
	case http.StatusForbidden:
		return metav1.StatusReasonForbidden
	}
	return metav1.StatusReasonServiceUnavailable
}

// TestStartContentAPIUnauthorized: the heartbeat calls OnRefused when the
// API server refuses the credential (401 on the patch as well), and not
// when only the content API answers 401 (its manager cannot authenticate
// the aggregation layer yet) while the API server accepts the credential:
// that would make the agent drop its connection and re-register.
func TestStartContentAPIUnauthorized(t *testing.T) {
	for _, tc := range []struct {
		name        string
		patchErr    error
		wantRefused bool
	}{
		{name: "content API only", patchErr: apierrors.NewForbidden(schema.GroupResource{Group: "fleet.cattle.io", Resource: "clusters"}, "c1", errors.New("no grant"))},
		{name: "revoked", patchErr: apierrors.NewUnauthorized("invalid bearer token"), wantRefused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				asked.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":401,"reason":"Unauthorized"}`))
			}))
			defer srv.Close()
			content, err := contentapi.NewRESTClient(&rest.Config{Host: srv.URL}, nil)
			if err != nil {
				t.Fatal(err)
			}
			cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "c1"}}
			up := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(cluster).WithStatusSubresource(cluster).
				WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
					return tc.patchErr
				}}).Build()
			refused := make(chan error, 1)
			h := New(Options{Upstream: up, Downstream: fake.NewClientBuilder().Build(), Content: content, Workspace: "ws", ClusterName: "c1",
				ClusterNamespace: "cluster-ns", FirstDelay: time.Millisecond, OnRefused: func(err error) { refused <- err }})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = h.Start(ctx)
			}()
			// A refusal ends Start after the first check-in; otherwise
			// the heartbeat retries, and a second attempt shows it did.
			deadline := time.After(30 * time.Second)
			for asked.Load() < 2 {
				select {
				case <-done:
				case <-deadline:
					t.Fatal("the heartbeat neither retried nor stopped")
				case <-time.After(10 * time.Millisecond):
					continue
				}
				break
			}
			cancel()
			<-done
			select {
			case err := <-refused:
				if !tc.wantRefused {
					t.Errorf("OnRefused(%v) for a 401 of the content API alone", err)
				}
			default:
				if tc.wantRefused {
					t.Error("OnRefused not called when the API server refused the credential")
				}
			}
		})
	}
}
