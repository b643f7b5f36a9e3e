package target

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
)

type clusterOpt func(*fleet.Cluster)

func withLabels(kv ...string) clusterOpt {
	return func(c *fleet.Cluster) {
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			c.Labels[kv[i]] = kv[i+1]
		}
	}
}

func cluster(name string, opts ...clusterOpt) *fleet.Cluster {
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ws"}}
	c.Status.Namespace = names.ClusterNamespace(c.Namespace, name)
	for _, o := range opts {
		o(c)
	}
	return c
}

func group(name string, lbls map[string]string, sel map[string]string) *fleet.ClusterGroup {
	g := &fleet.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ws", Labels: lbls}}
	if sel != nil {
		g.Spec.Selector = &metav1.LabelSelector{MatchLabels: sel}
	}
	return g
}

func sel(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

func infos(groups []*fleet.ClusterGroup, cs ...*fleet.Cluster) []ClusterInfo {
	out := make([]ClusterInfo, 0, len(cs))
	for _, c := range cs {
		out = append(out, NewClusterInfo(c, groups))
	}
	return out
}

func TestMatcher(t *testing.T) {
	groups := []*fleet.ClusterGroup{
		group("prod", map[string]string{"tier": "gold"}, map[string]string{"env": "prod"}),
		group("nil-selector", nil, nil),
		group("other-ns", nil, map[string]string{"env": "prod"}),
	}
	groups[2].Namespace = "elsewhere"
	prod := cluster("a", withLabels("env", "prod", fleet.ClusterDisplayNameLabel, "pretty"))
	dev := cluster("b", withLabels("env", "dev"))
	cases := []struct {
		name string
		crit Criteria
		want map[string]bool
	}{
		{"no criteria matches nothing", Criteria{}, map[string]bool{"a": false, "b": false}},
		{"by name", Criteria{ClusterName: "b"}, map[string]bool{"a": false, "b": true}},
		{"by display name label", Criteria{ClusterName: "pretty"}, map[string]bool{"a": true, "b": false}},
		{"by selector", Criteria{ClusterSelector: sel("env", "dev")}, map[string]bool{"a": false, "b": true}},
		{"empty selector matches all", Criteria{ClusterSelector: &metav1.LabelSelector{}}, map[string]bool{"a": true, "b": true}},
		{"by group", Criteria{ClusterGroup: "prod"}, map[string]bool{"a": true, "b": false}},
		{"nil-selector group has no members", Criteria{ClusterGroup: "nil-selector"}, map[string]bool{"a": false, "b": false}},
		{"group of other namespace ignored", Criteria{ClusterGroup: "other-ns"}, map[string]bool{"a": false, "b": false}},
		{"by group selector", Criteria{ClusterGroupSelector: sel("tier", "gold")}, map[string]bool{"a": true, "b": false}},
		{"group and group selector on the same group", Criteria{ClusterGroup: "prod", ClusterGroupSelector: sel("tier", "silver")}, map[string]bool{"a": false, "b": false}},
		{"criteria are ANDed", Criteria{ClusterName: "a", ClusterSelector: sel("env", "dev")}, map[string]bool{"a": false, "b": false}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := NewMatcher(c.crit)
			if err != nil {
				t.Fatal(err)
			}
			for _, ci := range infos(groups, prod, dev) {
				if got := m.Match(ci); got != c.want[ci.Cluster.Name] {
					t.Errorf("cluster %s: got %v, want %v", ci.Cluster.Name, got, c.want[ci.Cluster.Name])
				}
			}
		})
	}
	if _, err := NewMatcher(Criteria{ClusterSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x", Operator: "Bogus"}}}}); err == nil {
		t.Fatal("invalid selector accepted")
	}
}

func bundle(mode fleet.TargetCustomizationMode, targets []fleet.BundleTarget, restrictions []fleet.BundleTargetRestriction) *fleet.Bundle {
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ws"}}
	b.Spec.TargetCustomizationMode = mode
	b.Spec.Targets = targets
	b.Spec.TargetRestrictions = restrictions
	b.Spec.DefaultNamespace = "base"
	return b
}

func TestCustomizationSelection(t *testing.T) {
	gitTarget := fleet.BundleTarget{Name: "git", ClusterSelector: &metav1.LabelSelector{}}
	restr := []fleet.BundleTargetRestriction{{Name: "git", ClusterSelector: &metav1.LabelSelector{}}}
	custProd := fleet.BundleTarget{Name: "prod", ClusterSelector: sel("env", "prod"), BundleDeploymentOptions: fleet.BundleDeploymentOptions{TargetNamespace: "prod-ns", NamespaceLabels: map[string]string{"p": "1"}}}
	custEU := fleet.BundleTarget{Name: "eu", ClusterSelector: sel("region", "eu"), BundleDeploymentOptions: fleet.BundleDeploymentOptions{ServiceAccount: "eu-sa"}}
	skipDev := fleet.BundleTarget{Name: "nodev", ClusterSelector: sel("env", "dev"), DoNotDeploy: true}
	clusters := infos(nil,
		cluster("prod-eu", withLabels("env", "prod", "region", "eu")),
		cluster("prod-us", withLabels("env", "prod", "region", "us")),
		cluster("dev-eu", withLabels("env", "dev", "region", "eu")),
		cluster("pending"), // no status.namespace: a failed target
	)
	clusters[3].Cluster.Status.Namespace = ""
	type want struct {
		ns, sa string
		custom string
	}
	cases := []struct {
		name string
		b    *fleet.Bundle
		want map[string]want
	}{
		{
			"first match", bundle("", []fleet.BundleTarget{custProd, custEU, skipDev, gitTarget}, restr),
			map[string]want{"prod-eu": {"prod-ns", "", "prod"}, "prod-us": {"prod-ns", "", "prod"}, "dev-eu": {"", "eu-sa", "eu"}},
		},
		{
			"first match doNotDeploy", bundle("", []fleet.BundleTarget{skipDev, custEU, gitTarget}, restr),
			map[string]want{"prod-eu": {"", "eu-sa", "eu"}, "prod-us": {"", "", ""}},
		},
		{
			"all matches merge in order", bundle(fleet.AllMatches, []fleet.BundleTarget{custProd, custEU, gitTarget}, restr),
			map[string]want{"prod-eu": {"prod-ns", "eu-sa", "prod,eu"}, "prod-us": {"prod-ns", "", "prod"}, "dev-eu": {"", "eu-sa", "eu"}},
		},
		{
			"all matches any doNotDeploy skips", bundle(fleet.AllMatches, []fleet.BundleTarget{custEU, skipDev, gitTarget}, restr),
			map[string]want{"prod-eu": {"", "eu-sa", "eu"}, "prod-us": {"", "", ""}},
		},
		{
			"no restrictions: every target is real, first match wins, no customization",
			bundle("", []fleet.BundleTarget{custProd, custEU}, nil),
			map[string]want{"prod-eu": {"prod-ns", "", ""}, "prod-us": {"prod-ns", "", ""}, "dev-eu": {"", "eu-sa", ""}},
		},
		{
			"restriction excludes", bundle("", []fleet.BundleTarget{custProd, gitTarget}, []fleet.BundleTargetRestriction{{ClusterSelector: sel("region", "us")}}),
			map[string]want{"prod-us": {"prod-ns", "", "prod"}},
		},
		{
			"real doNotDeploy", bundle("", []fleet.BundleTarget{{Name: "x", ClusterSelector: sel("env", "dev"), DoNotDeploy: true}, {Name: "all", ClusterSelector: &metav1.LabelSelector{}}}, nil),
			map[string]want{"prod-eu": {"", "", ""}, "prod-us": {"", "", ""}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Compute(Input{Bundle: c.b, ManifestID: "s-abc", Clusters: clusters})
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]want{}
			for _, tg := range got {
				if tg.Cluster.Name == "pending" {
					if tg.Err == nil || tg.Cluster.Status.Namespace != names.ClusterNamespace("ws", "pending") {
						t.Fatalf("pending: err %v, namespace %q; want an error and the computed namespace", tg.Err, tg.Cluster.Status.Namespace)
					}
					continue
				}
				if tg.Err != nil {
					t.Fatalf("%s: %v", tg.Cluster.Name, tg.Err)
				}
				if tg.Options.DefaultNamespace != "base" {
					t.Errorf("%s: bundle options lost: %+v", tg.Cluster.Name, tg.Options)
				}
				if !strings.HasPrefix(tg.DeploymentID, "s-abc:") {
					t.Errorf("bad deploymentID %s", tg.DeploymentID)
				}
				seen[tg.Cluster.Name] = want{tg.Options.TargetNamespace, tg.Options.ServiceAccount, strings.Join(tg.Customizations, ",")}
			}
			if !reflect.DeepEqual(seen, c.want) {
				t.Fatalf("got  %v\nwant %v", seen, c.want)
			}
		})
	}
}

func TestInvalidSelectorIsBundleError(t *testing.T) {
	b := bundle("", []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"bad key!": "x"}}}}, nil)
	_, err := Compute(Input{Bundle: b, Clusters: infos(nil, cluster("a"))})
	var be *BundleError
	if err == nil || !asBundleError(err, &be) {
		t.Fatalf("want BundleError, got %v", err)
	}
}

func asBundleError(err error, be **BundleError) bool {
	b, ok := err.(*BundleError)
	*be = b
	return ok
}

func TestGitRepoRestrictions(t *testing.T) {
	all := []fleet.BundleTarget{{Name: "all", ClusterSelector: &metav1.LabelSelector{}}}
	cases := []struct {
		name    string
		opts    fleet.BundleDeploymentOptions
		r       fleet.GitRepoRestriction
		repo    string
		bundErr string
		tgtErr  string
		wantSA  string
	}{
		{name: "default SA applied", r: fleet.GitRepoRestriction{DefaultServiceAccount: "deployer"}, wantSA: "deployer"},
		{name: "SA not allowed", opts: fleet.BundleDeploymentOptions{ServiceAccount: "root"}, r: fleet.GitRepoRestriction{AllowedServiceAccounts: []string{"a"}}, tgtErr: "serviceAccount"},
		{name: "SA allowed", opts: fleet.BundleDeploymentOptions{ServiceAccount: "a"}, r: fleet.GitRepoRestriction{AllowedServiceAccounts: []string{"a"}}, wantSA: "a"},
		{name: "target ns not allowed", opts: fleet.BundleDeploymentOptions{TargetNamespace: "kube-system"}, r: fleet.GitRepoRestriction{AllowedTargetNamespaces: []string{"apps"}}, tgtErr: "target namespace"},
		{name: "repo not allowed", r: fleet.GitRepoRestriction{AllowedRepoPatterns: []string{`^https://github\.com/ok/`}}, repo: "https://evil.example/x", bundErr: "not allowed"},
		{name: "repo allowed", r: fleet.GitRepoRestriction{AllowedRepoPatterns: []string{`^https://github\.com/ok/`}}, repo: "https://github.com/ok/x"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := bundle("", all, nil)
			b.Spec.BundleDeploymentOptions = c.opts
			got, err := Compute(Input{Bundle: b, Clusters: infos(nil, cluster("a")), Restrictions: []*fleet.GitRepoRestriction{&c.r}, RepoURL: c.repo})
			if c.bundErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.bundErr) {
					t.Fatalf("want bundle error %q, got %v", c.bundErr, err)
				}
				return
			}
			if err != nil || len(got) != 1 {
				t.Fatalf("err=%v targets=%d", err, len(got))
			}
			if c.tgtErr != "" {
				if got[0].Err == nil || !strings.Contains(got[0].Err.Error(), c.tgtErr) {
					t.Fatalf("want target error %q, got %v", c.tgtErr, got[0].Err)
				}
				return
			}
			if got[0].Err != nil || got[0].Options.ServiceAccount != c.wantSA {
				t.Fatalf("err=%v sa=%q", got[0].Err, got[0].Options.ServiceAccount)
			}
		})
	}
}

func values(m map[string]interface{}) *fleet.GenericMap { return &fleet.GenericMap{Data: m} }

func TestMerge(t *testing.T) {
	tru, fals := true, false
	base := fleet.BundleDeploymentOptions{
		DefaultNamespace: "def", TargetNamespace: "tgt", ServiceAccount: "sa",
		Helm: &fleet.HelmOptions{Chart: "c", Values: values(map[string]interface{}{"a": 1.0, "nested": map[string]interface{}{"x": 1.0, "y": 2.0}}),
			ValuesFrom: []fleet.ValuesFrom{{ConfigMapKeyRef: &fleet.ConfigMapKeySelector{Name: "cm", Key: "k"}}}},
		Diff:                &fleet.DiffOptions{ComparePatches: []fleet.ComparePatch{{Kind: "Deployment", Name: "d", JSONPointers: []string{"/a"}}}},
		DownstreamResources: []fleet.DownstreamResource{{Kind: "Secret", Name: "s"}},
		NamespaceLabels:     map[string]string{"a": "1"},
		CreateNamespace:     &tru,
	}
	cases := []struct {
		name   string
		custom fleet.BundleDeploymentOptions
		check  func(t *testing.T, o fleet.BundleDeploymentOptions)
	}{
		{"empty custom keeps base", fleet.BundleDeploymentOptions{}, func(t *testing.T, o fleet.BundleDeploymentOptions) {
			if !reflect.DeepEqual(o, base) {
				t.Fatalf("changed: %+v", o)
			}
		}},
		{"dash clears namespaces", fleet.BundleDeploymentOptions{DefaultNamespace: "-", TargetNamespace: "-"}, func(t *testing.T, o fleet.BundleDeploymentOptions) {
			if o.DefaultNamespace != "" || o.TargetNamespace != "" {
				t.Fatalf("not cleared: %q %q", o.DefaultNamespace, o.TargetNamespace)
			}
		}},
		{"scalars override", fleet.BundleDeploymentOptions{TargetNamespace: "other", ServiceAccount: "x", KeepResources: true, CreateNamespace: &fals, Helm: &fleet.HelmOptions{Version: "2.0.0", TimeoutSeconds: 9}}, func(t *testing.T, o fleet.BundleDeploymentOptions) {
			if o.TargetNamespace != "other" || o.ServiceAccount != "x" || !o.KeepResources || *o.CreateNamespace || o.Helm.Chart != "c" || o.Helm.Version != "2.0.0" || o.Helm.TimeoutSeconds != 9 {
				t.Fatalf("bad: %+v %+v", o, o.Helm)
			}
		}},
		{"helm values deep merge", fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Values: values(map[string]interface{}{"b": 2.0, "nested": map[string]interface{}{"y": 3.0}})}}, func(t *testing.T, o fleet.BundleDeploymentOptions) {
			want := map[string]interface{}{"a": 1.0, "b": 2.0, "nested": map[string]interface{}{"x": 1.0, "y": 3.0}}
			if !reflect.DeepEqual(o.Helm.Values.Data, want) {
				t.Fatalf("got %v", o.Helm.Values.Data)
			}
			if base.Helm.Values.Data["nested"].(map[string]interface{})["y"] != 2.0 {
				t.Fatal("base modified")
			}
		}},
		{"lists merged by key, custom wins", fleet.BundleDeploymentOptions{
			Helm:                &fleet.HelmOptions{ValuesFrom: []fleet.ValuesFrom{{ConfigMapKeyRef: &fleet.ConfigMapKeySelector{Name: "cm", Key: "k"}}, {SecretKeyRef: &fleet.SecretKeySelector{Name: "s", Key: "k"}}}},
			Diff:                &fleet.DiffOptions{ComparePatches: []fleet.ComparePatch{{Kind: "Deployment", Name: "d", JSONPointers: []string{"/b"}}, {Kind: "Service", Name: "s"}}},
			DownstreamResources: []fleet.DownstreamResource{{Kind: "Secret", Name: "s"}, {Kind: "ConfigMap", Name: "c"}},
			NamespaceLabels:     map[string]string{"b": "2"},
		}, func(t *testing.T, o fleet.BundleDeploymentOptions) {
			if len(o.Helm.ValuesFrom) != 2 || len(o.DownstreamResources) != 2 || len(o.Diff.ComparePatches) != 2 || o.Diff.ComparePatches[0].JSONPointers[0] != "/b" {
				t.Fatalf("bad lists: %+v %+v %+v", o.Helm.ValuesFrom, o.DownstreamResources, o.Diff.ComparePatches)
			}
			if !reflect.DeepEqual(o.NamespaceLabels, map[string]string{"a": "1", "b": "2"}) {
				t.Fatalf("labels %v", o.NamespaceLabels)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.check(t, Merge(base, c.custom)) })
	}
}

func TestRenderValues(t *testing.T) {
	c := cluster("alpha", withLabels("env", "prod", "region", "eu", "secret.cattle.io/x", "hidden", "fleet.cattle.io/k", "kept"))
	c.Annotations = map[string]string{"owner": "team-a"}
	c.Spec.TemplateValues = values(map[string]interface{}{"replicas": 3.0})
	cases := []struct {
		name    string
		helm    fleet.HelmOptions
		want    map[string]interface{}
		wantErr string
	}{
		{"context fields", fleet.HelmOptions{Values: values(map[string]interface{}{
			"name": "${ .ClusterName }", "ns": "${ .ClusterNamespace }", "env": "${ .ClusterLabels.env }",
			"owner": "${ .ClusterAnnotations.owner }", "replicas": "${ .ClusterValues.replicas }", "up": "${ upper .ClusterName }",
		})}, map[string]interface{}{"name": "alpha", "ns": "ws", "env": "prod", "owner": "team-a", "replicas": float64(3), "up": "ALPHA"}, ""},
		{"cattle labels hidden but fleet kept", fleet.HelmOptions{Values: values(map[string]interface{}{"k": `${ get .ClusterLabels "fleet.cattle.io/k" }`, "h": `${ get .ClusterLabels "secret.cattle.io/x" }`})},
			map[string]interface{}{"k": "kept", "h": nil}, ""},
		{"label refs", fleet.HelmOptions{Values: values(map[string]interface{}{"r": "global.fleet.clusterLabels.region", "list": []interface{}{"global.fleet.clusterLabels.env"}, "none": "global.fleet.clusterLabels.nope"})},
			map[string]interface{}{"r": "eu", "list": []interface{}{"prod"}, "none": ""}, ""},
		{"templateValues win", fleet.HelmOptions{Values: values(map[string]interface{}{"x": "a"}), TemplateValues: map[string]string{"x": "${ .ClusterName }-x", "obj": "a: ${ .ClusterLabels.env }"}},
			map[string]interface{}{"x": "alpha-x", "obj": map[string]interface{}{"a": "prod"}}, ""},
		{"disablePreProcess keeps text", fleet.HelmOptions{DisablePreProcess: true, Values: values(map[string]interface{}{"x": "${ .ClusterName }"})}, map[string]interface{}{"x": "${ .ClusterName }"}, ""},
		{"missing key is an error", fleet.HelmOptions{Values: values(map[string]interface{}{"x": "${ .ClusterValues.nope }"})}, nil, "nope"},
		{"env is not available", fleet.HelmOptions{Values: values(map[string]interface{}{"x": `${ env "HOME" }`})}, nil, `function env is not available`},
		{"getHostByName is not available", fleet.HelmOptions{Values: values(map[string]interface{}{"x": `${ getHostByName "example.com" }`})}, nil, "function getHostByName is not available"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.helm
			got, err := RenderValues(fleet.BundleDeploymentOptions{Helm: &h}, c)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want error %q, got %v", tc.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Helm.Values.Data, tc.want) {
				t.Fatalf("got  %#v\nwant %#v", got.Helm.Values.Data, tc.want)
			}
		})
	}
}

func TestTemplateErrorOnOneTargetOnly(t *testing.T) {
	b := bundle("", []fleet.BundleTarget{{Name: "all", ClusterSelector: &metav1.LabelSelector{}}}, nil)
	b.Spec.Helm = &fleet.HelmOptions{Values: values(map[string]interface{}{"size": "${ .ClusterValues.size }"})}
	good := cluster("good")
	good.Spec.TemplateValues = values(map[string]interface{}{"size": "L"})
	bad := cluster("bad")
	got, err := Compute(Input{Bundle: b, ManifestID: "s-1", Clusters: infos(nil, good, bad)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range got {
		switch tg.Cluster.Name {
		case "good":
			if tg.Err != nil || tg.Options.Helm.Values.Data["size"] != "L" {
				t.Fatalf("good: %v %v", tg.Err, tg.Options.Helm.Values.Data)
			}
		case "bad":
			if tg.Err == nil || tg.DeploymentID != "" {
				t.Fatalf("bad cluster has no error")
			}
		}
	}
	if len(got) != 2 {
		t.Fatalf("got %d targets", len(got))
	}
}

func TestGroupsOfManyClusters(t *testing.T) {
	var cs []*fleet.Cluster
	for i := 0; i < 10; i++ {
		cs = append(cs, cluster(fmt.Sprintf("c%d", i), withLabels("n", fmt.Sprint(i%2))))
	}
	groups := []*fleet.ClusterGroup{group("even", nil, map[string]string{"n": "0"})}
	n := 0
	for _, ci := range infos(groups, cs...) {
		n += len(ci.Groups)
	}
	if n != 5 {
		t.Fatalf("%d memberships, want 5", n)
	}
}
