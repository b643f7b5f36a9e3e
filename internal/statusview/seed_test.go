package statusview

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// seedNow is the reference time of the seeded fleet's "last seen" ages.
var seedNow = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// seed is a small fleet in every interesting state: two clusters (one
// offline), a GitRepo whose three bundles are Ready, Modified, ErrApplied,
// NotReady, OutOfSync and not targeted, a stalled GitRepo without bundles, a
// HelmOp whose repository went away (its deployment stays Ready) and a bundle
// that belongs to no GitRepo. Each object is returned with its
// status, to be written with the status subresource.
func seed() []client.Object {
	ws := fleet.DefaultWorkspace
	cond := func(t string, s metav1.ConditionStatus, msg string) metav1.Condition {
		return metav1.Condition{Type: t, Status: s, Reason: "Seed", Message: msg, LastTransitionTime: metav1.NewTime(seedNow)}
	}
	cluster := func(name, env string, lastSeen time.Duration, state string, conds ...metav1.Condition) *fleet.Cluster {
		return &fleet.Cluster{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ws, Labels: map[string]string{"env": env, fleet.ClusterLabel: name}},
			Status: fleet.ClusterStatus{
				Namespace:  "cluster-" + ws + "-" + name + "-0123",
				Agent:      fleet.AgentStatus{LastSeen: metav1.NewTime(seedNow.Add(-lastSeen))},
				Display:    fleet.ClusterDisplay{State: state, ReadyBundles: "2/4"},
				Conditions: conds,
			},
		}
	}
	bundle := func(name, repo string) *fleet.Bundle {
		l := map[string]string{}
		if repo != "" {
			l[fleet.RepoLabel] = repo
		}
		return &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ws, Labels: l}}
	}
	helmOpBundle := func(name string) *fleet.Bundle {
		return &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ws, Labels: map[string]string{fleet.HelmOpLabel: name}}}
	}
	bd := func(bundle, cluster string, st fleet.BundleDeploymentStatus, staged string) *fleet.BundleDeployment {
		if staged == "" {
			staged = "s-1:abc"
		}
		return &fleet.BundleDeployment{
			ObjectMeta: metav1.ObjectMeta{Name: bundle, Namespace: "cluster-" + ws + "-" + cluster + "-0123", Labels: map[string]string{
				fleet.BundleLabel: bundle, fleet.BundleNamespaceLabel: ws, fleet.ClusterLabel: cluster, fleet.ClusterNamespaceLabel: ws,
			}},
			Spec:   fleet.BundleDeploymentSpec{DeploymentID: "s-1:abc", StagedDeploymentID: staged},
			Status: st,
		}
	}
	ready := fleet.BundleDeploymentStatus{AppliedDeploymentID: "s-1:abc", Ready: true, NonModified: true}
	return []client.Object{
		cluster("dev", "dev", 12*time.Second, "Ready", cond(fleet.ConditionReady, metav1.ConditionTrue, "")),
		cluster("prod", "prod", 7*time.Minute, "Offline", cond(fleet.ConditionOffline, metav1.ConditionTrue, "agent offline")),
		&fleet.GitRepo{
			ObjectMeta: metav1.ObjectMeta{Name: "examples", Namespace: ws},
			Spec:       fleet.GitRepoSpec{Repo: "http://127.0.0.1:1/examples.git"},
			Status: fleet.GitRepoStatus{Commit: "0123456789abcdef", StatusBase: fleet.StatusBase{Conditions: []metav1.Condition{
				cond(fleet.ConditionReady, metav1.ConditionFalse, "Modified(1) [Bundle examples-simple]"),
			}}},
		},
		&fleet.GitRepo{
			ObjectMeta: metav1.ObjectMeta{Name: "broken", Namespace: ws},
			Spec:       fleet.GitRepoSpec{Repo: "http://127.0.0.1:1/missing.git"},
			Status: fleet.GitRepoStatus{StatusBase: fleet.StatusBase{Conditions: []metav1.Condition{
				cond(fleet.ConditionStalled, metav1.ConditionTrue, "fetching http://127.0.0.1:1/missing.git: repository not found"),
			}}},
		},
		bundle("examples-simple", "examples"),
		bundle("examples-helm", "examples"),
		bundle("examples-kustomize", "examples"),
		bundle("manual", ""),
		&fleet.HelmOp{
			ObjectMeta: metav1.ObjectMeta{Name: "ingress", Namespace: ws},
			Spec: fleet.HelmOpSpec{BundleSpec: fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{
				Helm: &fleet.HelmOptions{Repo: "http://127.0.0.1:1/charts", Chart: "ingress", Version: "^4.0.0"}}}},
			Status: fleet.HelmOpStatus{Version: "4.1.0", StatusBase: fleet.StatusBase{Conditions: []metav1.Condition{
				cond(fleet.ConditionReady, metav1.ConditionFalse, "helm repository http://127.0.0.1:1/charts: connection refused"),
			}, Display: fleet.StatusDisplay{State: "Error", Error: true}}},
		},
		helmOpBundle("ingress"),
		bd("ingress", "dev", ready, ""),
		bd("examples-simple", "dev", fleet.BundleDeploymentStatus{AppliedDeploymentID: "s-1:abc", Ready: true,
			ModifiedStatus: []fleet.ModifiedStatus{{Kind: "ConfigMap", Namespace: "fleet-examples", Name: "simple", Patch: "{}"}}}, ""),
		bd("examples-simple", "prod", fleet.BundleDeploymentStatus{AppliedDeploymentID: "s-0:old"}, ""),
		bd("examples-helm", "dev", fleet.BundleDeploymentStatus{AppliedDeploymentID: "s-0:old", Conditions: []metav1.Condition{
			cond(fleet.ConditionDeployed, metav1.ConditionFalse, "rendering chart: template: greeting.yaml:3: function \"nope\" not defined"),
		}}, ""),
		bd("examples-helm", "prod", ready, ""),
		bd("examples-kustomize", "dev", fleet.BundleDeploymentStatus{AppliedDeploymentID: "s-1:abc", NonModified: true,
			NonReadyStatus: []fleet.NonReadyStatus{{Kind: "Service", Namespace: "fleet-examples", Name: "web", Summary: fleet.Summary{State: "pending", Message: []string{"Service is not ready"}}}}}, ""),
		bd("manual", "dev", ready, "s-2:new"),
	}
}

// inMemory sorts the seeded objects into a Fleet, as Load would list them.
func inMemory(objs []client.Object) Fleet {
	var f Fleet
	for _, o := range objs {
		switch o := o.(type) {
		case *fleet.Cluster:
			f.Clusters = append(f.Clusters, *o)
		case *fleet.GitRepo:
			f.GitRepos = append(f.GitRepos, *o)
		case *fleet.HelmOp:
			f.HelmOps = append(f.HelmOps, *o)
		case *fleet.Bundle:
			f.Bundles = append(f.Bundles, *o)
		case *fleet.BundleDeployment:
			f.BundleDeployments = append(f.BundleDeployments, *o)
		}
	}
	return f
}
