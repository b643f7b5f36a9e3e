// Package statusview turns the Fleet objects of a manager cluster into the
// picture `fleet status` shows: every GitRepo and HelmOp with its Bundles as rows and
// the clusters as columns, the state of each BundleDeployment in the cells,
// when each cluster last checked in and the first error of anything that is
// not Ready.
//
// Building the view is pure (objects in, View out) so that it can be
// golden-tested; Load is the only function that talks to an API server.
package statusview

import (
	"fmt"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/summary"
)

// Fleet is the listed state of a manager cluster (or of one workspace).
type Fleet struct {
	GitRepos          []fleet.GitRepo
	HelmOps           []fleet.HelmOp
	Bundles           []fleet.Bundle
	BundleDeployments []fleet.BundleDeployment
	Clusters          []fleet.Cluster
}

// Cell states beyond fleet.BundleState: a bundle that does not target a
// cluster shows "-".
const NotTargeted = "-"

// View is what the status screen shows.
type View struct {
	Clusters []ClusterRow
	Groups   []Group
	// Problems lists the first error of every object that is not Ready,
	// in display order.
	Problems []Problem
}

// ClusterRow describes one cluster.
type ClusterRow struct {
	Namespace, Name string
	// Labels are the user's labels (fleet.cattle.io/* and
	// management.cattle.io/* left out), rendered k=v,k=v.
	Labels   string
	State    string
	LastSeen time.Time
	// Bundles is "ready/desired" as the manager reports it.
	Bundles string
}

// Group is one GitRepo or HelmOp (or the bundles that belong to none) and
// its matrix.
type Group struct {
	// Title is "GitRepo <ns>/<name>", "HelmOp <ns>/<name>" or "Bundles
	// without a GitRepo in <ns>".
	Title string
	// Commit is the GitRepo's last deployed commit, shortened.
	Commit string
	// Version is the HelmOp's deployed chart version.
	Version string
	State   string
	// Columns are the clusters of the group's namespace, by name.
	Columns []string
	Rows    []BundleRow
}

// BundleRow is one bundle and its state on every column's cluster.
type BundleRow struct {
	Name  string
	Cells []string
}

// Problem is one thing that is not Ready, with its first error.
type Problem struct {
	Object  string
	State   string
	Message string
}

// Build computes the view. Objects are sorted, so the output does not depend
// on list order.
func Build(f Fleet) View {
	v := View{}
	offline := map[string]bool{}
	clustersByNS := map[string][]string{}
	clusters := append([]fleet.Cluster(nil), f.Clusters...)
	sort.Slice(clusters, func(i, j int) bool { return key(&clusters[i].ObjectMeta) < key(&clusters[j].ObjectMeta) })
	for i := range clusters {
		c := &clusters[i]
		state := ClusterState(c)
		if state == string(fleet.Offline) {
			offline[c.Namespace+"/"+c.Name] = true
		}
		v.Clusters = append(v.Clusters, ClusterRow{
			Namespace: c.Namespace,
			Name:      c.Name,
			Labels:    userLabels(c.Labels),
			State:     state,
			LastSeen:  c.Status.Agent.LastSeen.Time,
			Bundles:   c.Status.Display.ReadyBundles,
		})
		clustersByNS[c.Namespace] = append(clustersByNS[c.Namespace], c.Name)
		if state != string(fleet.Ready) {
			msg := conditionMessage(c.Status.Conditions, fleet.ConditionReady)
			if state == string(fleet.Offline) {
				msg = "agent has not checked in since " + seen(c.Status.Agent.LastSeen)
				if c.Status.Agent.LastSeen.IsZero() {
					msg = "agent has never checked in"
				}
			}
			if state == fleet.ClusterWaitCheckIn && msg == "" {
				msg = "waiting for the agent to check in"
			}
			v.Problems = append(v.Problems, Problem{Object: "cluster " + key(&c.ObjectMeta), State: state, Message: msg})
		}
	}

	// BundleDeployments indexed by bundle namespace/name, then cluster name.
	bds := map[string]map[string]*fleet.BundleDeployment{}
	for i := range f.BundleDeployments {
		bd := &f.BundleDeployments[i]
		bkey := bd.Labels[fleet.BundleNamespaceLabel] + "/" + bd.Labels[fleet.BundleLabel]
		if bds[bkey] == nil {
			bds[bkey] = map[string]*fleet.BundleDeployment{}
		}
		bds[bkey][bd.Labels[fleet.ClusterLabel]] = bd
	}

	bundles := append([]fleet.Bundle(nil), f.Bundles...)
	sort.Slice(bundles, func(i, j int) bool { return key(&bundles[i].ObjectMeta) < key(&bundles[j].ObjectMeta) })
	repos := append([]fleet.GitRepo(nil), f.GitRepos...)
	sort.Slice(repos, func(i, j int) bool { return key(&repos[i].ObjectMeta) < key(&repos[j].ObjectMeta) })

	used := map[string]bool{}
	var bundleProblems []Problem
	addRows := func(g *Group, ns string, match func(*fleet.Bundle) bool) {
		g.Columns = clustersByNS[ns]
		for i := range bundles {
			b := &bundles[i]
			if b.Namespace != ns || used[key(&b.ObjectMeta)] || !match(b) {
				continue
			}
			used[key(&b.ObjectMeta)] = true
			row := BundleRow{Name: b.Name}
			if len(bds[key(&b.ObjectMeta)]) == 0 {
				// Nothing deployed: a bundle that failed before targeting
				// (bad options, no matching cluster) says why on itself.
				if c := find(b.Status.Conditions, fleet.ConditionReady); c != nil && c.Status == metav1.ConditionFalse && c.Message != "" {
					bundleProblems = append(bundleProblems, Problem{Object: "bundle " + key(&b.ObjectMeta), State: string(fleet.NotReady), Message: c.Message})
				}
			}
			for _, cl := range g.Columns {
				bd := bds[key(&b.ObjectMeta)][cl]
				cell := NotTargeted
				if bd != nil {
					// Whether the cluster is offline is the cluster's to
					// say (below), not the deployment's mark.
					cell = string(summary.ReportedState(bd))
					if offline[ns+"/"+cl] && cell != string(fleet.Ready) {
						cell = string(fleet.Offline)
					}
					if cell != string(fleet.Ready) && cell != string(fleet.Offline) {
						bundleProblems = append(bundleProblems, Problem{
							Object:  fmt.Sprintf("bundle %s on %s", key(&b.ObjectMeta), cl),
							State:   cell,
							Message: DeploymentError(bd),
						})
					}
				}
				row.Cells = append(row.Cells, cell)
			}
			g.Rows = append(g.Rows, row)
		}
	}
	for i := range repos {
		r := &repos[i]
		g := Group{Title: "GitRepo " + key(&r.ObjectMeta), Commit: short(r.Status.Commit), State: GitRepoState(r)}
		addRows(&g, r.Namespace, func(b *fleet.Bundle) bool { return b.Labels[fleet.RepoLabel] == r.Name })
		v.Groups = append(v.Groups, g)
		if g.State != string(fleet.Ready) {
			v.Problems = append(v.Problems, Problem{Object: "gitrepo " + key(&r.ObjectMeta), State: g.State, Message: gitRepoError(r)})
		}
	}
	ops := append([]fleet.HelmOp(nil), f.HelmOps...)
	sort.Slice(ops, func(i, j int) bool { return key(&ops[i].ObjectMeta) < key(&ops[j].ObjectMeta) })
	for i := range ops {
		op := &ops[i]
		g := Group{Title: "HelmOp " + key(&op.ObjectMeta), Version: op.Status.Version, State: originState(op.Status.StatusBase)}
		addRows(&g, op.Namespace, func(b *fleet.Bundle) bool { return b.Labels[fleet.HelmOpLabel] == op.Name })
		v.Groups = append(v.Groups, g)
		if g.State != string(fleet.Ready) {
			msg := originError(op.Status.StatusBase, fleet.ConditionPolled)
			if msg == "" && op.Status.Version == "" {
				msg = "waiting for the chart to be downloaded"
			}
			v.Problems = append(v.Problems, Problem{Object: "helmop " + key(&op.ObjectMeta), State: g.State, Message: msg})
		}
	}
	var loose []string
	for i := range bundles {
		if !used[key(&bundles[i].ObjectMeta)] {
			loose = appendUnique(loose, bundles[i].Namespace)
		}
	}
	for _, ns := range loose {
		g := Group{Title: "Bundles without a GitRepo in " + ns}
		addRows(&g, ns, func(*fleet.Bundle) bool { return true })
		v.Groups = append(v.Groups, g)
	}
	v.Problems = append(v.Problems, bundleProblems...)
	return v
}

// AllReady reports whether every targeted cell of every group is Ready,
// there is at least one, and no GitRepo is in error.
func (v View) AllReady() bool {
	n := 0
	for _, g := range v.Groups {
		if g.State != "" && g.State != string(fleet.Ready) && g.State != string(fleet.NotReady) {
			return false
		}
		for _, r := range g.Rows {
			for _, c := range r.Cells {
				if c == NotTargeted {
					continue
				}
				if c != string(fleet.Ready) {
					return false
				}
				n++
			}
		}
	}
	return n > 0
}

// Counts returns how many targeted cells are Ready out of how many.
func (v View) Counts() (ready, total int) {
	for _, g := range v.Groups {
		for _, r := range g.Rows {
			for _, c := range r.Cells {
				if c == NotTargeted {
					continue
				}
				total++
				if c == string(fleet.Ready) {
					ready++
				}
			}
		}
	}
	return ready, total
}

// DeploymentError is the first thing that explains why a BundleDeployment
// is not Ready: a failing condition, then a non-ready or modified resource.
func DeploymentError(bd *fleet.BundleDeployment) string {
	for _, t := range []string{fleet.ConditionDeployed, fleet.ConditionInstalled, fleet.ConditionReady, fleet.ConditionMonitored} {
		if c := find(bd.Status.Conditions, t); c != nil && c.Status == metav1.ConditionFalse && c.Message != "" {
			return c.Message
		}
	}
	if len(bd.Status.NonReadyStatus) > 0 {
		n := bd.Status.NonReadyStatus[0]
		msg := n.Summary.State
		if len(n.Summary.Message) > 0 {
			msg = strings.Join(n.Summary.Message, "; ")
		}
		return fmt.Sprintf("%s %s: %s", n.Kind, join(n.Namespace, n.Name), msg)
	}
	if len(bd.Status.ModifiedStatus) > 0 {
		m := bd.Status.ModifiedStatus[0]
		what := "modified"
		switch {
		case m.Create:
			what = "missing"
		case m.Delete:
			what = "orphaned"
		}
		return fmt.Sprintf("%s %s %s", m.Kind, join(m.Namespace, m.Name), what)
	}
	if bd.Status.AppliedDeploymentID != bd.Spec.DeploymentID {
		return "waiting for the agent to deploy it"
	}
	if bd.Spec.DeploymentID != bd.Spec.StagedDeploymentID {
		return "a newer version is staged but not rolled out yet"
	}
	return ""
}

// ClusterState is the cluster's display state, as the manager computed it:
// WaitCheckIn until the agent first reports, then Offline when the Offline
// condition is True (for another reason than the wait for that first
// report), else the manager's display state.
func ClusterState(c *fleet.Cluster) string {
	if c.Status.Agent.LastSeen.IsZero() {
		// Never reported: not offline, just not there yet.
		return fleet.ClusterWaitCheckIn
	}
	// Offline, unless the condition still waits for the first check-in:
	// the agent has just reported and the manager has not rolled it up
	// yet. It is not offline, and its display state says what it waits for.
	if o := find(c.Status.Conditions, fleet.ConditionOffline); o != nil && o.Status == metav1.ConditionTrue &&
		o.Reason != fleet.ClusterWaitCheckIn {
		return string(fleet.Offline)
	}
	if c.Status.Display.State != "" {
		return c.Status.Display.State
	}
	if r := find(c.Status.Conditions, fleet.ConditionReady); r != nil && r.Status == metav1.ConditionTrue {
		return string(fleet.Ready)
	}
	return string(fleet.NotReady)
}

// GitRepoState is "Ready" when the Ready condition is True, "Stalled" or
// "Error" on bad input or a failing fetch, otherwise its display state or
// "NotReady".
func GitRepoState(r *fleet.GitRepo) string { return originState(r.Status.StatusBase) }

// originState is the state of a GitRepo or HelmOp from its shared status.
func originState(st fleet.StatusBase) string {
	if s := find(st.Conditions, fleet.ConditionStalled); s != nil && s.Status == metav1.ConditionTrue {
		return "Stalled"
	}
	if c := find(st.Conditions, fleet.ConditionReady); c != nil && c.Status == metav1.ConditionTrue {
		return string(fleet.Ready)
	}
	if st.Display.Error {
		return "Error"
	}
	if st.Display.State != "" {
		return st.Display.State
	}
	return string(fleet.NotReady)
}

func gitRepoError(r *fleet.GitRepo) string {
	if msg := originError(r.Status.StatusBase, fleet.ConditionGitPolling); msg != "" {
		return msg
	}
	if r.Status.Commit == "" {
		return "waiting for the first commit to be fetched"
	}
	return ""
}

// originError is the first message of a failing condition of a GitRepo or
// HelmOp (polling is the kind's own polling condition), or its display
// message.
func originError(st fleet.StatusBase, polling string) string {
	for _, t := range []string{fleet.ConditionStalled, fleet.ConditionAccepted, polling, fleet.ConditionReady} {
		c := find(st.Conditions, t)
		bad := c != nil && c.Message != "" && (c.Status == metav1.ConditionFalse) != (t == fleet.ConditionStalled)
		if t == polling && c != nil && c.Reason == "PollingDisabled" {
			bad = false // an exact chart version is not polled: not a problem
		}
		if bad {
			return c.Message
		}
	}
	return st.Display.Message
}

func conditionMessage(conds []metav1.Condition, t string) string {
	if c := find(conds, t); c != nil {
		return c.Message
	}
	return ""
}

func find(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

func userLabels(l map[string]string) string {
	var out []string
	for k, v := range l {
		if strings.HasPrefix(k, fleet.LabelPrefix) || strings.HasPrefix(k, "management.cattle.io/") {
			continue
		}
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func key(m *metav1.ObjectMeta) string { return join(m.Namespace, m.Name) }

func join(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

func short(commit string) string {
	if len(commit) > 8 {
		return commit[:8]
	}
	return commit
}

func seen(t metav1.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}

func appendUnique(s []string, v string) []string {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}
