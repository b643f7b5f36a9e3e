package metrics

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/scheme"
)

// TestCollectorShardsAndDuplicates: each source reports only its shard's
// GitRepos, Bundles and BundleDeployments; Cluster families come from the
// sources that ask for them, once even when two do (several managers in one
// process); a GitRepo's git counters go when no source sees it.
func TestCollectorShardsAndDuplicates(t *testing.T) {
	obj := func(name, shard string) metav1.ObjectMeta {
		m := metav1.ObjectMeta{Name: name, Namespace: "ws"}
		if shard != "" {
			m.Labels = map[string]string{fleet.ShardLabel: shard}
		}
		return m
	}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		&fleet.Bundle{ObjectMeta: obj("b-none", "")},
		&fleet.Bundle{ObjectMeta: obj("b-a", "a")},
		&fleet.Bundle{ObjectMeta: obj("b-z", "z")},
		&fleet.BundleDeployment{ObjectMeta: obj("bd-a", "a")},
		&fleet.GitRepo{ObjectMeta: obj("r-a", "a")},
		&fleet.Cluster{ObjectMeta: obj("c1", "")},
		&fleet.HelmOp{ObjectMeta: obj("h-none", "")},
	).Build()

	col := &collector{sources: map[int]Source{
		0: {Reader: c, ShardID: "", Clusters: true, HelmOps: true, ListTimeout: 5e9},
		1: {Reader: c, ShardID: "a", ListTimeout: 5e9},
		2: {Reader: c, ShardID: "", Clusters: true, ListTimeout: 5e9}, // a second unsharded manager
	}}
	saved := git
	git = newGitMetrics()
	defer func() { git = saved }()
	git.observe("ws", "r-a", 0, nil)
	git.observe("ws", "gone", 0, nil)

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	mfs, err := reg.Gather() // fails on duplicate series
	if err != nil {
		t.Fatal(err)
	}
	names := map[string][]string{}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "name" {
					names[mf.GetName()] = append(names[mf.GetName()], l.GetValue())
				}
			}
		}
	}
	check := func(metric string, want ...string) {
		t.Helper()
		got := names[metric]
		if len(got) != len(want) {
			t.Errorf("%s: got %v, want %v", metric, got, want)
			return
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: got %v, want %v", metric, got, want)
			}
		}
	}
	check("fleet_bundle_ready", "b-a", "b-none")
	check("fleet_bundledeployment_state", "bd-a")
	check("fleet_gitrepo_ready_clusters", "r-a")
	check("fleet_cluster_state", "c1")
	check("fleet_gitrepo_fetch_latest_commit_success_total", "r-a")
	check("fleet_helmop_ready_clusters", "h-none")
}

// listRecorder is a reader that records which kinds were listed.
type listRecorder struct {
	client.Reader
	listed map[string]bool
}

func (l *listRecorder) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	l.listed[fmt.Sprintf("%T", list)] = true
	return l.Reader.List(ctx, list, opts...)
}

// TestCollectorHelmOpsOff: a manager whose HelmOp controller is off never
// lists HelmOps (its cache would start an informer for them) and reports
// none; one with it on does.
func TestCollectorHelmOpsOff(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		&fleet.HelmOp{ObjectMeta: metav1.ObjectMeta{Name: "h", Namespace: "ws"}}).Build()
	for _, on := range []bool{false, true} {
		rec := &listRecorder{Reader: c, listed: map[string]bool{}}
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(&collector{sources: map[int]Source{0: {Reader: rec, HelmOps: on, ListTimeout: 5e9}}})
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		reported := false
		for _, mf := range mfs {
			reported = reported || strings.HasPrefix(mf.GetName(), "fleet_helmop_")
		}
		if listed := rec.listed["*v1alpha1.HelmOpList"]; listed != on || reported != on {
			t.Errorf("HelmOps %v: listed %v, reported %v; want both %v", on, listed, reported, on)
		}
	}
}

// TestCollectorStaleOfflineMark: once a cluster's agent checked in again,
// the manager's fleet_bundledeployment_state and the agent's own
// fleet_agent_bundledeployments count its deployments by what the agent
// reported, not by the Offline mark the manager has not cleared yet.
func TestCollectorStaleOfflineMark(t *testing.T) {
	bd := &fleet.BundleDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "cluster-ns", Labels: map[string]string{
			fleet.ClusterLabel: "c1", fleet.ClusterNamespaceLabel: "ws"}},
		Spec: fleet.BundleDeploymentSpec{DeploymentID: "d1", StagedDeploymentID: "d1"},
		Status: fleet.BundleDeploymentStatus{AppliedDeploymentID: "d1", Ready: true, NonModified: true,
			Conditions: []metav1.Condition{{Type: fleet.ConditionOffline, Status: metav1.ConditionTrue, Reason: "AgentOffline"}}},
	}
	online := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: "ws"}}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(bd, online).Build()
	for _, src := range []Source{
		{Reader: c, Clusters: true, ListTimeout: 5e9},
		{Reader: c, Agent: true, Namespace: "cluster-ns", ListTimeout: 5e9},
	} {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(&collector{sources: map[int]Source{0: src}})
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		states := map[string]float64{}
		for _, mf := range mfs {
			if n := mf.GetName(); n != "fleet_bundledeployment_state" && n != "fleet_agent_bundledeployments" {
				continue
			}
			for _, m := range mf.Metric {
				for _, l := range m.Label {
					if l.GetName() == "state" {
						states[l.GetValue()] += m.GetGauge().GetValue()
					}
				}
			}
		}
		if states["Ready"] != 1 || states["Offline"] != 0 {
			t.Errorf("agent source %v: states %v, want the deployment counted Ready, not Offline", src.Agent, states)
		}
	}
}
