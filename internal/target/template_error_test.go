package target

import (
	"errors"
	"strings"
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// secret stands for a password kept in Helm values or cluster values. A
// template error ends up in Bundle, GitRepo and HelmOp status, which many
// more people can read than the values; Go's template and YAML errors quote
// template text, rendered output and values, so none of it may pass
// through.
const secret = "hunter2S3cret"

// TestTemplateErrorsDoNotQuoteValues: every way templating can fail for a
// cluster gives an error that names the option (helm.values.<path> or
// helm.templateValues.<key>) and the kind of failure, and quotes no value.
// Each case is one where Go's own error message does quote the secret or
// text around it.
func TestTemplateErrorsDoNotQuoteValues(t *testing.T) {
	cases := []struct {
		name          string
		helm          fleet.HelmOptions
		clusterValues map[string]interface{}
		wantPath      string
		wantKind      string
	}{
		{
			name:     "unquoted default is parsed as a function name",
			helm:     fleet.HelmOptions{Values: values(map[string]interface{}{"db": map[string]interface{}{"password": "${ .ClusterValues.pw | default " + secret + " }"}})},
			wantPath: "helm.values.db.password",
			wantKind: "template syntax error",
		},
		{
			name: "unclosed action reads the next line of a multi-line value",
			helm: fleet.HelmOptions{Values: values(map[string]interface{}{
				"config": "user=${ .ClusterValues.user\n" + secret + "\n",
				"name":   "${ .ClusterName }",
			})},
			wantPath: "helm.values.config",
			wantKind: "template syntax error",
		},
		{
			name: "unclosed action reads the next value",
			helm: fleet.HelmOptions{Values: values(map[string]interface{}{
				"list": []interface{}{"${ .ClusterName", secret},
			})},
			wantPath: "helm.values.list[0]",
			wantKind: "template syntax error",
		},
		{
			name:          "function error quotes a cluster value",
			helm:          fleet.HelmOptions{Values: values(map[string]interface{}{"expires": "${ mustToDate \"2006-01-02\" .ClusterValues.pw }", "other": "${ .ClusterName }"})},
			clusterValues: map[string]interface{}{"pw": secret},
			wantPath:      "helm.values.expires",
			wantKind:      "function mustToDate failed",
		},
		{
			name:     "literal given arguments",
			helm:     fleet.HelmOptions{Values: values(map[string]interface{}{"a": map[string]interface{}{"b": "${ \"" + secret + "\" 1 }"}})},
			wantPath: "helm.values.a.b",
			wantKind: "template execution error",
		},
		{
			name: "missing key next to a secret",
			helm: fleet.HelmOptions{Values: values(map[string]interface{}{"db": map[string]interface{}{
				"host": "${ .ClusterValues.missing }", "password": secret, "user": "${ .ClusterName }",
			}})},
			wantPath: "helm.values.db.host",
			wantKind: "at .ClusterValues.missing (no such key)",
		},
		{
			name: "rendered values are not YAML",
			helm: fleet.HelmOptions{Values: values(map[string]interface{}{
				"a": "${ .ClusterValues.bad }", "b": "${ .ClusterName }", "password": secret,
			})},
			clusterValues: map[string]interface{}{"bad": "{" + secret + ": 1}: 2"},
			wantPath:      "helm.values.a",
			wantKind:      "not valid YAML after templating",
		},
		{
			name:          "templateValues output is not YAML",
			helm:          fleet.HelmOptions{TemplateValues: map[string]string{"creds": "{${ .ClusterValues.pw }: 1}: 2"}},
			clusterValues: map[string]interface{}{"pw": secret},
			wantPath:      "helm.templateValues.creds",
			wantKind:      "not valid YAML after templating",
		},
		{
			name:          "templateValues syntax error",
			helm:          fleet.HelmOptions{TemplateValues: map[string]string{"creds": "password: ${ default " + secret + " .ClusterValues.pw }"}},
			clusterValues: map[string]interface{}{"pw": "x"},
			wantPath:      "helm.templateValues.creds",
			wantKind:      "template syntax error",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster("alpha")
			if tc.clusterValues != nil {
				c.Spec.TemplateValues = values(tc.clusterValues)
			}
			h := tc.helm
			_, err := RenderValues(fleet.BundleDeploymentOptions{Helm: &h}, c)
			if err == nil {
				t.Fatal("rendering succeeded, want an error")
			}
			msg := err.Error()
			if strings.Contains(msg, secret) {
				t.Errorf("error quotes the secret: %s", msg)
			}
			if !strings.HasPrefix(msg, tc.wantPath+": ") {
				t.Errorf("error %q does not start with the location %q", msg, tc.wantPath)
			}
			if !strings.Contains(msg, tc.wantKind) {
				t.Errorf("error %q does not say %q", msg, tc.wantKind)
			}
			var re *RenderError
			if !errors.As(err, &re) {
				t.Errorf("error is %T, want *RenderError", err)
			}
		})
	}
}

// TestTemplateErrorNamesCluster: Compute keeps a template error on the
// cluster it happened for (the bundle status prefixes it with the
// cluster), and leaves the other clusters, whose values render, alone.
func TestTemplateErrorNamesCluster(t *testing.T) {
	good, bad := cluster("good"), cluster("bad")
	good.Spec.TemplateValues = values(map[string]interface{}{"host": "db.example.com"})
	b := &fleet.Bundle{}
	b.Namespace = "ws"
	b.Spec.Helm = &fleet.HelmOptions{Values: values(map[string]interface{}{
		"db": map[string]interface{}{"host": "${ .ClusterValues.host }", "password": secret},
	})}
	b.Spec.Targets = []fleet.BundleTarget{{Name: "all", ClusterSelector: sel()}}
	targets, err := Compute(Input{Bundle: b, ManifestID: "s-1", Clusters: infos(nil, good, bad)})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*Target{}
	for _, tg := range targets {
		byName[tg.Cluster.Name] = tg
	}
	if byName["good"] == nil || byName["good"].Err != nil {
		t.Fatalf("good cluster: %+v", byName["good"])
	}
	if byName["bad"] == nil || byName["bad"].Err == nil {
		t.Fatalf("bad cluster has no error: %+v", byName["bad"])
	}
	msg := byName["bad"].Err.Error()
	if strings.Contains(msg, secret) || !strings.HasPrefix(msg, "helm.values.db.host: ") {
		t.Fatalf("error for cluster %s: %s", byName["bad"].Key(), msg)
	}
}
