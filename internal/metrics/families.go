// Package metrics exposes Fleet-level Prometheus metrics computed at scrape
// time from the informer caches the controllers already keep: nothing is
// updated from reconcilers, no API call is made per scrape, and a series
// disappears on the next scrape after its object is gone. Names and labels
// follow Fleet's (namespace "fleet"), minus the per-generation label, so
// that a rollout does not create a new series per object.
package metrics

import (
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/redact"
	"github.com/fleetgo/fleet/internal/summary"
)

// clusterNameLabel is Rancher's label with the management cluster name,
// reported as cluster_name when present (else the Cluster's own name).
const clusterNameLabel = "management.cattle.io/cluster-name"

var (
	bundleLabels  = []string{"name", "namespace", "commit", "repo"}
	bdLabels      = []string{"name", "namespace", "cluster_name", "cluster_namespace", "repo", "commit", "bundle", "bundle_namespace", "state"}
	clusterLabels = []string{"name", "namespace", "cluster_name", "cluster_display_name"}
	groupLabels   = []string{"name", "namespace"}
	gitrepoLabels = []string{"name", "namespace", "repo", "branch", "paths"}
	// The chart version is not a label: a new release would be a new series.
	helmopLabels = []string{"name", "namespace", "repo", "chart"}
)

func desc(name, help string, labels []string) *prometheus.Desc {
	return prometheus.NewDesc("fleet_"+name, help, labels, nil)
}

func withState(l []string) []string { return append(append([]string{}, l...), "state") }

// Bundle family: the Bundle's summary counts and its worst state.
var (
	bundleNotReady     = desc("bundle_not_ready", "BundleDeployments of the bundle in state NotReady.", bundleLabels)
	bundleWaitApplied  = desc("bundle_wait_applied", "BundleDeployments of the bundle in state WaitApplied.", bundleLabels)
	bundleErrApplied   = desc("bundle_err_applied", "BundleDeployments of the bundle in state ErrApplied.", bundleLabels)
	bundleOutOfSync    = desc("bundle_out_of_sync", "BundleDeployments of the bundle in state OutOfSync.", bundleLabels)
	bundleModified     = desc("bundle_modified", "BundleDeployments of the bundle in state Modified.", bundleLabels)
	bundleReady        = desc("bundle_ready", "BundleDeployments of the bundle in state Ready.", bundleLabels)
	bundlePending      = desc("bundle_pending", "BundleDeployments of the bundle in state Pending.", bundleLabels)
	bundleDesiredReady = desc("bundle_desired_ready", "BundleDeployments the bundle should have Ready.", bundleLabels)
	bundleState        = desc("bundle_state", "1 for the bundle's current (worst) state.", withState(bundleLabels))

	bdState = desc("bundledeployment_state", "1 for the BundleDeployment's current state.", bdLabels)

	clusterDesiredReadyGitRepos = desc("cluster_desired_ready_git_repos", "GitRepos that should be ready on the cluster.", clusterLabels)
	clusterReadyGitRepos        = desc("cluster_ready_git_repos", "GitRepos ready on the cluster.", clusterLabels)
	clusterDesiredReadyHelmOps  = desc("cluster_desired_ready_helm_ops", "HelmOps that should be ready on the cluster.", clusterLabels)
	clusterReadyHelmOps         = desc("cluster_ready_helm_ops", "HelmOps ready on the cluster.", clusterLabels)
	clusterResources            = resourceDescs("cluster_resources_count_", clusterLabels, map[string]string{
		"desiredready": "desiredready", "missing": "missing", "modified": "modified", "notready": "notready",
		"orphaned": "orphaned", "ready": "ready", "unknown": "unknown", "waitapplied": "waitapplied",
	})
	clusterState = desc("cluster_state", "1 for the cluster's current display state.", withState(clusterLabels))

	groupClusterCount         = desc("cluster_group_cluster_count", "Clusters in the group.", groupLabels)
	groupNonReadyClusterCount = desc("cluster_group_non_ready_cluster_count", "Clusters of the group that are not ready.", groupLabels)
	groupResources            = resourceDescs("cluster_group_resource_count_", groupLabels, map[string]string{
		"desiredready": "desired_ready", "missing": "missing", "modified": "modified", "notready": "notready",
		"orphaned": "orphaned", "ready": "ready", "unknown": "unknown", "waitapplied": "waitapplied",
	})
	groupBundleDesiredReady = desc("cluster_group_bundle_desired_ready", "BundleDeployments to the group's clusters that should be Ready.", groupLabels)
	groupBundleReady        = desc("cluster_group_bundle_ready", "BundleDeployments to the group's clusters that are Ready.", groupLabels)
	groupState              = desc("cluster_group_state", "1 for the group's current display state.", withState(groupLabels))

	gitrepoResources = resourceDescs("gitrepo_resources_", gitrepoLabels, map[string]string{
		"desiredready": "desired_ready", "missing": "missing", "modified": "modified", "notready": "not_ready",
		"orphaned": "orphaned", "ready": "ready", "unknown": "unknown", "waitapplied": "wait_applied",
	})
	gitrepoDesiredReadyClusters = desc("gitrepo_desired_ready_clusters", "Clusters the GitRepo's bundles should be ready on.", gitrepoLabels)
	agentBundleDeployments      = desc("agent_bundledeployments", "BundleDeployments of this agent's cluster per state.", []string{"cluster_namespace", "state"})

	gitrepoReadyClusters = desc("gitrepo_ready_clusters", "Clusters the GitRepo's bundles are ready on (lowest over its bundles).", gitrepoLabels)

	helmopDesiredReadyClusters = desc("helmop_desired_ready_clusters", "Clusters the HelmOp's bundle should be ready on.", helmopLabels)
	helmopReadyClusters        = desc("helmop_ready_clusters", "Clusters the HelmOp's bundle is ready on.", helmopLabels)
	helmopState                = desc("helmop_state", "1 for the HelmOp's current display state.", withState(helmopLabels))
)

// resourceDescs names one gauge per ResourceCounts field; suffix maps the
// field key to Fleet's spelling for that family (which differs by family).
func resourceDescs(prefix string, labels []string, suffix map[string]string) map[string]*prometheus.Desc {
	out := map[string]*prometheus.Desc{}
	for k, s := range suffix {
		out[k] = desc(prefix+s, "Deployed resources in state "+k+".", labels)
	}
	return out
}

func allDescs() []*prometheus.Desc {
	out := []*prometheus.Desc{
		bundleNotReady, bundleWaitApplied, bundleErrApplied, bundleOutOfSync, bundleModified, bundleReady,
		bundlePending, bundleDesiredReady, bundleState, bdState,
		clusterDesiredReadyGitRepos, clusterReadyGitRepos, clusterState,
		groupClusterCount, groupNonReadyClusterCount, groupBundleDesiredReady, groupBundleReady, groupState,
		gitrepoDesiredReadyClusters, gitrepoReadyClusters, agentBundleDeployments,
		clusterDesiredReadyHelmOps, clusterReadyHelmOps, helmopDesiredReadyClusters, helmopReadyClusters, helmopState,
	}
	for _, m := range []map[string]*prometheus.Desc{clusterResources, groupResources, gitrepoResources} {
		for _, d := range m {
			out = append(out, d)
		}
	}
	return out
}

// emitFunc receives one sample; label values are in the desc's order.
type emitFunc func(d *prometheus.Desc, v float64, labelValues ...string)

func bundleSamples(b *fleet.Bundle, emit emitFunc) {
	lv := []string{b.Name, b.Namespace, b.Labels[fleet.CommitLabel], b.Labels[fleet.RepoLabel]}
	s := b.Status.Summary
	for d, v := range map[*prometheus.Desc]int{
		bundleNotReady: s.NotReady, bundleWaitApplied: s.WaitApplied, bundleErrApplied: s.ErrApplied,
		bundleOutOfSync: s.OutOfSync, bundleModified: s.Modified, bundleReady: s.Ready,
		bundlePending: s.Pending, bundleDesiredReady: s.DesiredReady,
	} {
		emit(d, float64(v), lv...)
	}
	emit(bundleState, 1, append(lv, string(summary.WorstState(s)))...)
}

// liveness tells, for a cluster (namespace/name), whether its agent is
// offline; known is false when the cluster is not in view.
type liveness func(clusterKey string) (offline, known bool)

// bundleDeploymentSamples reports bd in the state the Bundle and Cluster
// statuses count it in: its cluster's liveness decides Offline, since a
// deployment's own Offline mark lingers after its agent is back until the
// manager clears it. Without the cluster in view, the mark decides.
func bundleDeploymentSamples(bd *fleet.BundleDeployment, live liveness, emit emitFunc) {
	l := bd.Labels
	state := summary.DeploymentState(bd)
	if live != nil {
		if offline, known := live(l[fleet.ClusterNamespaceLabel] + "/" + l[fleet.ClusterLabel]); known {
			state = summary.ReportedState(bd)
			if offline {
				state = fleet.Offline
			}
		}
	}
	emit(bdState, 1, bd.Name, bd.Namespace, l[fleet.ClusterLabel], l[fleet.ClusterNamespaceLabel],
		l[fleet.RepoLabel], l[fleet.CommitLabel], l[fleet.BundleLabel], l[fleet.BundleNamespaceLabel],
		string(state))
}

func resourceSamples(descs map[string]*prometheus.Desc, rc fleet.ResourceCounts, emit emitFunc, lv []string) {
	for k, v := range map[string]int{
		"desiredready": rc.DesiredReady, "missing": rc.Missing, "modified": rc.Modified, "notready": rc.NotReady,
		"orphaned": rc.Orphaned, "ready": rc.Ready, "unknown": rc.Unknown, "waitapplied": rc.WaitApplied,
	} {
		emit(descs[k], float64(v), lv...)
	}
}

func clusterSamples(c *fleet.Cluster, emit emitFunc) {
	clusterName := c.Labels[clusterNameLabel]
	if clusterName == "" {
		clusterName = c.Name
	}
	display := c.Labels[fleet.ClusterDisplayNameLabel]
	if display == "" {
		display = c.Name
	}
	lv := []string{c.Name, c.Namespace, clusterName, display}
	emit(clusterDesiredReadyGitRepos, float64(c.Status.DesiredReadyGitRepos), lv...)
	emit(clusterReadyGitRepos, float64(c.Status.ReadyGitRepos), lv...)
	emit(clusterDesiredReadyHelmOps, float64(c.Status.DesiredReadyHelmOps), lv...)
	emit(clusterReadyHelmOps, float64(c.Status.ReadyHelmOps), lv...)
	resourceSamples(clusterResources, c.Status.ResourceCounts, emit, lv)
	state := c.Status.Display.State
	if state == "" {
		state = fleet.ClusterWaitCheckIn
	}
	emit(clusterState, 1, append(lv, state)...)
}

func clusterGroupSamples(g *fleet.ClusterGroup, emit emitFunc) {
	lv := []string{g.Name, g.Namespace}
	emit(groupClusterCount, float64(g.Status.ClusterCount), lv...)
	emit(groupNonReadyClusterCount, float64(g.Status.NonReadyClusterCount), lv...)
	resourceSamples(groupResources, g.Status.ResourceCounts, emit, lv)
	emit(groupBundleDesiredReady, float64(g.Status.Summary.DesiredReady), lv...)
	emit(groupBundleReady, float64(g.Status.Summary.Ready), lv...)
	state := g.Status.Display.State
	if state == "" {
		state = string(summary.WorstState(g.Status.Summary))
	}
	emit(groupState, 1, append(lv, state)...)
}

// gitRepoLabelValues are the GitRepo family's label values; paths are
// sorted and joined so that the value is stable. The repo URL is redacted:
// /metrics is served without authentication, and a URL may carry a token
// or password.
func gitRepoLabelValues(r *fleet.GitRepo) []string {
	paths := append([]string{}, r.Spec.Paths...)
	sort.Strings(paths)
	branch := r.Spec.Branch
	if branch == "" && r.Spec.Revision == "" {
		branch = "master"
	}
	return []string{r.Name, r.Namespace, redact.URL(r.Spec.Repo), branch, strings.Join(paths, ";")}
}

func gitRepoSamples(r *fleet.GitRepo, emit emitFunc) {
	lv := gitRepoLabelValues(r)
	resourceSamples(gitrepoResources, r.Status.ResourceCounts, emit, lv)
	emit(gitrepoDesiredReadyClusters, float64(r.Status.DesiredReadyClusters), lv...)
	emit(gitrepoReadyClusters, float64(r.Status.ReadyClusters), lv...)
}

func helmOpSamples(op *fleet.HelmOp, emit emitFunc) {
	var repo, chart string
	if h := op.Spec.Helm; h != nil {
		// Redacted like a GitRepo's URL (gitRepoLabelValues): a chart may
		// be a URL too (oci://, https://, git::).
		repo, chart = redact.URL(h.Repo), redact.URL(h.Chart)
	}
	lv := []string{op.Name, op.Namespace, repo, chart}
	emit(helmopDesiredReadyClusters, float64(op.Status.DesiredReadyClusters), lv...)
	emit(helmopReadyClusters, float64(op.Status.ReadyClusters), lv...)
	state := op.Status.Display.State
	if state == "" {
		state = string(fleet.NotReady)
	}
	emit(helmopState, 1, append(lv, state)...)
}
