package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// collect runs one emit function and returns its samples by metric name.
func collect(t *testing.T, fn func(emitFunc)) map[string][]sample {
	t.Helper()
	out := map[string][]sample{}
	fn(func(d *prometheus.Desc, v float64, lv ...string) {
		m, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, v, lv...)
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		pb := &dto.Metric{}
		if err := m.Write(pb); err != nil {
			t.Fatal(err)
		}
		s := sample{labels: map[string]string{}, value: pb.GetGauge().GetValue()}
		for _, l := range pb.Label {
			s.labels[l.GetName()] = l.GetValue()
		}
		name := d.String()
		name = name[strings.Index(name, `"`)+1:]
		s.name = name[:strings.Index(name, `"`)]
		out[s.name] = append(out[s.name], s)
	})
	return out
}

func TestBundleSamples(t *testing.T) {
	b := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ws", Generation: 7,
			Labels: map[string]string{fleet.RepoLabel: "repo", fleet.CommitLabel: "abc"}},
		Status: fleet.BundleStatus{Summary: fleet.BundleSummary{Ready: 2, ErrApplied: 1, DesiredReady: 3}},
	}
	got := collect(t, func(e emitFunc) { bundleSamples(b, e) })
	tests := []struct {
		metric string
		want   float64
	}{
		{"fleet_bundle_ready", 2}, {"fleet_bundle_err_applied", 1}, {"fleet_bundle_desired_ready", 3},
		{"fleet_bundle_not_ready", 0}, {"fleet_bundle_modified", 0},
	}
	for _, tt := range tests {
		s := got[tt.metric]
		if len(s) != 1 || s[0].value != tt.want {
			t.Errorf("%s = %+v, want one sample %v", tt.metric, s, tt.want)
			continue
		}
		if s[0].labels["repo"] != "repo" || s[0].labels["commit"] != "abc" || s[0].labels["name"] != "app" {
			t.Errorf("%s labels = %v", tt.metric, s[0].labels)
		}
		if _, ok := s[0].labels["generation"]; ok {
			t.Errorf("%s has a generation label: one new series per rollout", tt.metric)
		}
	}
	if st := got["fleet_bundle_state"]; len(st) != 1 || st[0].labels["state"] != string(fleet.ErrApplied) {
		t.Errorf("state = %+v, want one series with the worst state ErrApplied", st)
	}
}

func TestBundleDeploymentState(t *testing.T) {
	tests := []struct {
		name string
		bd   fleet.BundleDeployment
		want fleet.BundleState
	}{
		{"ready", fleet.BundleDeployment{
			Spec:   fleet.BundleDeploymentSpec{DeploymentID: "d1", StagedDeploymentID: "d1"},
			Status: fleet.BundleDeploymentStatus{AppliedDeploymentID: "d1", Ready: true, NonModified: true}}, fleet.Ready},
		{"not applied yet", fleet.BundleDeployment{
			Spec: fleet.BundleDeploymentSpec{DeploymentID: "d2", StagedDeploymentID: "d2"},
		}, fleet.WaitApplied},
		{"deploy failed", fleet.BundleDeployment{
			Spec: fleet.BundleDeploymentSpec{DeploymentID: "d2"},
			Status: fleet.BundleDeploymentStatus{Conditions: []metav1.Condition{
				{Type: fleet.ConditionDeployed, Status: metav1.ConditionFalse, Reason: "Failed"}}}}, fleet.ErrApplied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.bd.Name, tt.bd.Namespace = "app", "cluster-ns"
			tt.bd.Labels = map[string]string{fleet.ClusterLabel: "c1", fleet.BundleLabel: "app", fleet.BundleNamespaceLabel: "ws"}
			got := collect(t, func(e emitFunc) { bundleDeploymentSamples(&tt.bd, nil, e) })["fleet_bundledeployment_state"]
			if len(got) != 1 || got[0].labels["state"] != string(tt.want) || got[0].value != 1 {
				t.Fatalf("got %+v, want one series state=%s value 1", got, tt.want)
			}
			if got[0].labels["cluster_name"] != "c1" || got[0].labels["bundle_namespace"] != "ws" {
				t.Errorf("labels %v", got[0].labels)
			}
		})
	}
}

// TestBundleDeploymentStateFollowsClusterLiveness: a deployment's Offline
// mark lingers after its agent checked in again (until the manager clears
// it); the metric, like the Bundle and Cluster statuses, lets the
// cluster's own Offline condition decide whenever the cluster is in view.
func TestBundleDeploymentStateFollowsClusterLiveness(t *testing.T) {
	marked := fleet.BundleDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "cluster-ns", Labels: map[string]string{
			fleet.ClusterLabel: "c1", fleet.ClusterNamespaceLabel: "ws"}},
		Spec: fleet.BundleDeploymentSpec{DeploymentID: "d1", StagedDeploymentID: "d1"},
		Status: fleet.BundleDeploymentStatus{AppliedDeploymentID: "d1", Ready: true, NonModified: true,
			Conditions: []metav1.Condition{{Type: fleet.ConditionOffline, Status: metav1.ConditionTrue, Reason: "AgentOffline"}}},
	}
	unmarked := *marked.DeepCopy()
	unmarked.Status.Conditions = nil
	clusters := func(offline bool) liveness {
		return func(key string) (bool, bool) {
			if key != "ws/c1" {
				return false, false
			}
			return offline, true
		}
	}
	tests := []struct {
		name string
		bd   fleet.BundleDeployment
		live liveness
		want fleet.BundleState
	}{
		{"mark, cluster back online", marked, clusters(false), fleet.Ready},
		{"mark, cluster offline", marked, clusters(true), fleet.Offline},
		{"no mark yet, cluster offline", unmarked, clusters(true), fleet.Offline},
		{"mark, cluster not in view", marked, func(string) (bool, bool) { return false, false }, fleet.Offline},
		{"mark, clusters not listed", marked, nil, fleet.Offline},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := collect(t, func(e emitFunc) { bundleDeploymentSamples(&tt.bd, tt.live, e) })["fleet_bundledeployment_state"]
			if len(got) != 1 || got[0].labels["state"] != string(tt.want) {
				t.Fatalf("got %+v, want state %s", got, tt.want)
			}
		})
	}
}

func TestClusterAndGroupSamples(t *testing.T) {
	c := &fleet.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: "ws", Labels: map[string]string{fleet.ClusterDisplayNameLabel: "prod-eu"}},
		Status: fleet.ClusterStatus{ReadyGitRepos: 1, DesiredReadyGitRepos: 2,
			ResourceCounts: fleet.ResourceCounts{Ready: 5, Missing: 1}, Display: fleet.ClusterDisplay{State: "Offline"}},
	}
	got := collect(t, func(e emitFunc) { clusterSamples(c, e) })
	check := func(metric string, want float64) {
		t.Helper()
		if s := got[metric]; len(s) != 1 || s[0].value != want {
			t.Errorf("%s = %+v, want %v", metric, s, want)
		}
	}
	check("fleet_cluster_ready_git_repos", 1)
	check("fleet_cluster_desired_ready_git_repos", 2)
	check("fleet_cluster_resources_count_ready", 5)
	check("fleet_cluster_resources_count_missing", 1)
	if s := got["fleet_cluster_state"]; len(s) != 1 || s[0].labels["state"] != "Offline" || s[0].labels["cluster_display_name"] != "prod-eu" {
		t.Errorf("state = %+v", s)
	}
	fresh := collect(t, func(e emitFunc) { clusterSamples(&fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "new"}}, e) })
	if s := fresh["fleet_cluster_state"]; len(s) != 1 || s[0].labels["state"] != "WaitCheckIn" {
		t.Errorf("a cluster that never checked in: %+v", s)
	}

	g := &fleet.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: "ws"},
		Status: fleet.ClusterGroupStatus{ClusterCount: 3, NonReadyClusterCount: 1,
			Summary: fleet.BundleSummary{Ready: 4, DesiredReady: 6, NotReady: 2}}}
	got = collect(t, func(e emitFunc) { clusterGroupSamples(g, e) })
	check("fleet_cluster_group_cluster_count", 3)
	check("fleet_cluster_group_non_ready_cluster_count", 1)
	check("fleet_cluster_group_bundle_ready", 4)
	check("fleet_cluster_group_bundle_desired_ready", 6)
	check("fleet_cluster_group_resource_count_desired_ready", 0)
	if s := got["fleet_cluster_group_state"]; len(s) != 1 || s[0].labels["state"] != string(fleet.NotReady) {
		t.Errorf("group state = %+v", s)
	}
}

func TestGitRepoLabelValues(t *testing.T) {
	r := &fleet.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ws"},
		Spec: fleet.GitRepoSpec{Repo: "https://git/x", Paths: []string{"b", "a"}}}
	got := gitRepoLabelValues(r)
	want := []string{"r", "ws", "https://git/x", "master", "a;b"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("got %v, want %v", got, want)
	}
	r.Spec.Revision = "v1"
	if got := gitRepoLabelValues(r); got[3] != "" {
		t.Errorf("a pinned revision has no branch: %v", got)
	}
}

func TestGitMetricsPrune(t *testing.T) {
	g := newGitMetrics()
	g.observe("ws", "kept", 0, nil)
	g.observe("ws", "gone", 0, errFake{})
	g.prune(map[string]bool{"ws/kept": true})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(g)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "name" && l.GetValue() == "gone" {
					t.Errorf("%s still has a series of the deleted GitRepo", mf.GetName())
				}
			}
		}
		if len(mf.Metric) != 1 {
			t.Errorf("%s has %d series, want 1 (kept)", mf.GetName(), len(mf.Metric))
		}
	}
	if len(mfs) != 3 {
		t.Errorf("got %d families, want success, failure and duration", len(mfs))
	}
}

type errFake struct{}

func (errFake) Error() string { return "fake" }

func TestHelmOpSamples(t *testing.T) {
	op := &fleet.HelmOp{
		ObjectMeta: metav1.ObjectMeta{Name: "ingress", Namespace: "ws"},
		Spec: fleet.HelmOpSpec{BundleSpec: fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{
			Helm: &fleet.HelmOptions{Repo: "https://charts.example.com", Chart: "ingress", Version: "^4"}}}},
		Status: fleet.HelmOpStatus{Version: "4.1.0", StatusBase: fleet.StatusBase{ReadyClusters: 2, DesiredReadyClusters: 3,
			Display: fleet.StatusDisplay{State: "NotReady"}}},
	}
	got := collect(t, func(e emitFunc) { helmOpSamples(op, e) })
	for metric, want := range map[string]float64{"fleet_helmop_ready_clusters": 2, "fleet_helmop_desired_ready_clusters": 3} {
		s := got[metric]
		if len(s) != 1 || s[0].value != want || s[0].labels["chart"] != "ingress" || s[0].labels["repo"] != "https://charts.example.com" {
			t.Errorf("%s = %+v, want one sample %v", metric, s, want)
		}
		if _, ok := s[0].labels["version"]; ok {
			t.Errorf("%s has a version label: one new series per chart release", metric)
		}
	}
	if st := got["fleet_helmop_state"]; len(st) != 1 || st[0].labels["state"] != "NotReady" {
		t.Errorf("state = %+v", st)
	}
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ws"},
		Status: fleet.ClusterStatus{ReadyHelmOps: 1, DesiredReadyHelmOps: 2}}
	cs := collect(t, func(e emitFunc) { clusterSamples(c, e) })
	if s := cs["fleet_cluster_ready_helm_ops"]; len(s) != 1 || s[0].value != 1 {
		t.Errorf("cluster ready helm ops = %+v", s)
	}
	if s := cs["fleet_cluster_desired_ready_helm_ops"]; len(s) != 1 || s[0].value != 2 {
		t.Errorf("cluster desired ready helm ops = %+v", s)
	}
}
