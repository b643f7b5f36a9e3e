package bundle_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/bundle"
)

func labelsFor(i int) map[string]string {
	env, region := "dev", "us"
	if i%4 == 0 {
		env = "prod"
	}
	if i%3 == 0 {
		region = "eu"
	}
	return map[string]string{"env": env, "region": region}
}

// expectation is what one cluster should get from the "app" bundle.
type expectation struct{ ns, sa string }

func expectApp(name string, l map[string]string) (expectation, bool) {
	if name == "c-007" || (l["region"] != "eu" && l["region"] != "us") {
		return expectation{}, false
	}
	switch {
	case l["env"] == "prod":
		return expectation{ns: "prod-ns"}, true
	case l["region"] == "eu":
		return expectation{sa: "eu-sa"}, true
	}
	return expectation{}, true
}

func TestTargeting200Clusters(t *testing.T) {
	ctx := context.Background()
	ws := "ws-200"
	createNamespace(t, ctx, ws, nil)
	clusterLabels := map[string]map[string]string{}
	for i := 0; i < 200; i++ {
		name := fmt.Sprintf("c-%03d", i)
		clusterLabels[name] = labelsFor(i)
		newCluster(t, ctx, ws, name, labelsFor(i), time.Second)
	}
	must(t, env.Client.Create(ctx, &fleet.ClusterGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "eu", Labels: map[string]string{"tier": "gold"}},
		Spec:       fleet.ClusterGroupSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}}},
	}))
	inRegions := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "region", Operator: metav1.LabelSelectorOpIn, Values: []string{"eu", "us"}}}}
	app := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "app", Labels: map[string]string{fleet.RepoLabel: "repo", "kubectl.kubernetes.io/last-applied-configuration": "x"}}}
	app.Spec.Resources = resources("kind: ConfigMap\n")
	app.Spec.DefaultNamespace = "app"
	app.Spec.Helm = &fleet.HelmOptions{Values: &fleet.GenericMap{Data: map[string]interface{}{
		"cluster": "${ .ClusterName }", "env": "global.fleet.clusterLabels.env", "password": "s3cret",
	}}}
	app.Spec.Targets = []fleet.BundleTarget{
		{Name: "prod", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}, BundleDeploymentOptions: fleet.BundleDeploymentOptions{TargetNamespace: "prod-ns"}},
		{Name: "eu", ClusterGroup: "eu", BundleDeploymentOptions: fleet.BundleDeploymentOptions{ServiceAccount: "eu-sa"}},
		{Name: "skip", ClusterName: "c-007", DoNotDeploy: true},
		{Name: "git", ClusterSelector: inRegions},
	}
	app.Spec.TargetRestrictions = []fleet.BundleTargetRestriction{{Name: "git", ClusterSelector: inRegions}}
	must(t, env.Client.Create(ctx, app))
	euOnly := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "eu-only"}}
	euOnly.Spec.Resources = resources("kind: Secret\n")
	euOnly.Spec.Targets = []fleet.BundleTarget{{ClusterGroup: "eu", ClusterGroupSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}}}
	must(t, env.Client.Create(ctx, euOnly))

	check := func() error {
		bds, err := bundleDeployments(ctx, ws, "app")
		if err != nil {
			return err
		}
		want := 0
		for name, l := range clusterLabels {
			exp, ok := expectApp(name, l)
			bd := bds[name]
			if !ok {
				if bd != nil {
					return fmt.Errorf("app: unexpected deployment for %s", name)
				}
				continue
			}
			want++
			if bd == nil {
				return fmt.Errorf("app: no deployment for %s", name)
			}
			o := bd.Spec.Options
			if o.TargetNamespace != exp.ns || o.ServiceAccount != exp.sa || o.DefaultNamespace != "app" {
				return fmt.Errorf("app on %s: namespace %q sa %q, want %+v", name, o.TargetNamespace, o.ServiceAccount, exp)
			}
		}
		if len(bds) != want {
			return fmt.Errorf("app: %d deployments, want %d", len(bds), want)
		}
		eu, err := bundleDeployments(ctx, ws, "eu-only")
		if err != nil {
			return err
		}
		wantEU := 0
		for name, l := range clusterLabels {
			if l["region"] == "eu" {
				wantEU++
				if eu[name] == nil {
					return fmt.Errorf("eu-only: no deployment for %s", name)
				}
			}
		}
		if len(eu) != wantEU {
			return fmt.Errorf("eu-only: %d deployments, want %d", len(eu), wantEU)
		}
		return nil
	}
	eventually(t, 120*time.Second, check)

	// Labels, secret values and content reference of one deployment.
	bds, err := bundleDeployments(ctx, ws, "app")
	must(t, err)
	bd := bds["c-005"]
	for k, v := range map[string]string{fleet.BundleLabel: "app", fleet.BundleNamespaceLabel: ws, fleet.ClusterLabel: "c-005", fleet.ClusterNamespaceLabel: ws, fleet.ManagedLabel: "true", fleet.RepoLabel: "repo"} {
		if bd.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, bd.Labels[k], v)
		}
	}
	if _, ok := bd.Labels["kubectl.kubernetes.io/last-applied-configuration"]; ok {
		t.Error("kubectl label copied")
	}
	if !strings.HasPrefix(bd.Spec.DeploymentID, bd.Labels[fleet.ContentNameLabel]+":") || bd.Spec.StagedDeploymentID != bd.Spec.DeploymentID {
		t.Errorf("deploymentID %q, staged %q, content %q", bd.Spec.DeploymentID, bd.Spec.StagedDeploymentID, bd.Labels[fleet.ContentNameLabel])
	}
	if bd.Spec.Options.Helm != nil && bd.Spec.Options.Helm.Values != nil {
		t.Errorf("helm values left in the BundleDeployment spec: %v", bd.Spec.Options.Helm.Values.Data)
	}
	sec := &corev1.Secret{}
	must(t, env.Client.Get(ctx, types.NamespacedName{Namespace: bd.Namespace, Name: bd.Name}, sec))
	var vals map[string]interface{}
	must(t, json.Unmarshal(sec.Data[bundle.ValuesKey], &vals))
	if vals["cluster"] != "c-005" || vals["env"] != "dev" || vals["password"] != "s3cret" {
		t.Errorf("values secret: %v", vals)
	}
	if bundle.ValuesHash(sec.Data[bundle.ValuesKey]) != bd.Spec.ValuesHash || string(sec.Type) != fleet.SecretTypeBundleDeploymentOptions {
		t.Errorf("valuesHash %q does not match the secret (type %s)", bd.Spec.ValuesHash, sec.Type)
	}

	// Bundle, cluster and group status roll up.
	eventually(t, 60*time.Second, func() error {
		b := &fleet.Bundle{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ws, Name: "app"}, b); err != nil {
			return err
		}
		if b.Status.Summary.DesiredReady != len(bds) || b.Status.Display.ReadyClusters != fmt.Sprintf("0/%d", len(bds)) {
			return fmt.Errorf("bundle summary %+v display %+v", b.Status.Summary.DesiredReady, b.Status.Display)
		}
		if len(b.Status.Summary.NonReadyResources) > 10 {
			return fmt.Errorf("nonReadyResources not capped: %d", len(b.Status.Summary.NonReadyResources))
		}
		c := &fleet.Cluster{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ws, Name: "c-000"}, c); err != nil {
			return err
		}
		if c.Status.Display.ReadyBundles != "0/2" || c.Status.DesiredReadyGitRepos != 1 {
			return fmt.Errorf("cluster c-000 status: %+v gitrepos %d", c.Status.Display, c.Status.DesiredReadyGitRepos)
		}
		g := &fleet.ClusterGroup{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ws, Name: "eu"}, g); err != nil {
			return err
		}
		if g.Status.ClusterCount != 67 || g.Status.Display.ReadyClusters != "0/67" || len(g.Status.NonReadyClusters) != 10 {
			return fmt.Errorf("group status %+v", g.Status.Display)
		}
		return nil
	})

	// Relabel: the deployments follow.
	relabel := func(name string, kv ...string) {
		c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name}}
		update(t, ctx, c, false, func() {
			for i := 0; i+1 < len(kv); i += 2 {
				c.Labels[kv[i]] = kv[i+1]
				clusterLabels[name][kv[i]] = kv[i+1]
			}
		})
	}
	relabel("c-001", "region", "eu") // joins group eu: eu-only, and sa eu-sa
	relabel("c-004", "env", "dev")   // leaves prod: no prod-ns
	relabel("c-002", "region", "asia")
	eventually(t, 60*time.Second, check)
}
