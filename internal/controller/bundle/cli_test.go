package bundle_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/cli"
)

// `fleet target` previews without writing, from a file and by name, and a
// template error shows on its cluster only — in the CLI and on the Bundle.
func TestFleetTargetAndTemplateError(t *testing.T) {
	ctx := context.Background()
	ws := "ws-cli"
	createNamespace(t, ctx, ws, nil)
	for _, n := range []string{"x1", "x2", "x3"} {
		c := newCluster(t, ctx, ws, n, map[string]string{"env": map[string]string{"x1": "prod", "x2": "dev", "x3": "dev"}[n]}, time.Second)
		if n != "x3" {
			update(t, ctx, c, false, func() {
				c.Spec.TemplateValues = &fleet.GenericMap{Data: map[string]interface{}{"size": n + "-size"}}
			})
		}
	}
	b := &fleet.Bundle{TypeMeta: metav1.TypeMeta{APIVersion: fleet.GroupVersion.String(), Kind: "Bundle"}, ObjectMeta: metav1.ObjectMeta{Name: "preview"}}
	b.Spec.Resources = resources("a: b\n")
	b.Spec.Helm = &fleet.HelmOptions{Values: &fleet.GenericMap{Data: map[string]interface{}{"size": "${ .ClusterValues.size }"}}}
	b.Spec.Targets = []fleet.BundleTarget{
		{Name: "prod", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}, BundleDeploymentOptions: fleet.BundleDeploymentOptions{TargetNamespace: "p"}},
		{Name: "all", ClusterSelector: &metav1.LabelSelector{}},
	}
	b.Spec.TargetRestrictions = []fleet.BundleTargetRestriction{{Name: "all", ClusterSelector: &metav1.LabelSelector{}}}
	data, err := yaml.Marshal(b)
	must(t, err)
	file := filepath.Join(t.TempDir(), "bundle.yaml")
	must(t, os.WriteFile(file, append([]byte("---\n"), data...), 0o600))

	run := func(args ...string) (string, error) {
		root := cli.NewRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append([]string{"--kubeconfig", env.Kubeconfig, "-n", ws, "target"}, args...))
		err := root.ExecuteContext(ctx)
		return out.String(), err
	}
	out, err := run("-b", file, "-o", "json")
	must(t, err)
	var rows []cli.TargetRow
	must(t, json.Unmarshal([]byte(out), &rows))
	byCluster := map[string]cli.TargetRow{}
	for _, r := range rows {
		byCluster[r.Cluster] = r
	}
	if len(rows) != 3 {
		t.Fatalf("rows: %s", out)
	}
	x1, x2, x3 := byCluster[ws+"/x1"], byCluster[ws+"/x2"], byCluster[ws+"/x3"]
	if x1.Action != "create" || x1.Options.TargetNamespace != "p" || fmt.Sprint(x1.Customizations) != "[prod]" || x1.Options.Helm.Values.Data["size"] != "x1-size" || fmt.Sprint(x1.Partitions) != "[All]" {
		t.Errorf("x1: %+v", x1)
	}
	if x2.Options.TargetNamespace != "" || x2.Target != "all" {
		t.Errorf("x2: %+v", x2)
	}
	if x3.Error == "" || !strings.Contains(x3.Error, "size") {
		t.Errorf("x3 should show the template error: %+v", x3)
	}
	bds, err := bundleDeployments(ctx, ws, "preview")
	must(t, err)
	if len(bds) != 0 {
		t.Fatal("fleet target wrote deployments")
	}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ws, Name: "preview"}, &fleet.Bundle{}); err == nil {
		t.Fatal("fleet target created the bundle")
	}

	// Create it for real: the erroring cluster gets nothing, the others
	// deploy, and the Bundle's Ready condition names the error.
	b.Namespace = ws
	must(t, env.Client.Create(ctx, b))
	eventually(t, 60*time.Second, func() error {
		bds, err := bundleDeployments(ctx, ws, "preview")
		if err != nil {
			return err
		}
		if len(bds) != 2 || bds["x3"] != nil {
			return fmt.Errorf("deployments: %v", sortedKeys(bds))
		}
		got := &fleet.Bundle{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ws, Name: "preview"}, got); err != nil {
			return err
		}
		var ready *metav1.Condition
		for i := range got.Status.Conditions {
			if got.Status.Conditions[i].Type == fleet.ConditionReady {
				ready = &got.Status.Conditions[i]
			}
		}
		if ready == nil || ready.Status != metav1.ConditionFalse || !strings.Contains(ready.Message, "cluster "+ws+"/x3") || got.Status.Summary.ErrApplied != 1 {
			return fmt.Errorf("ready condition %+v summary %+v", ready, got.Status.Summary)
		}
		return nil
	})
	out, err = run("preview")
	must(t, err)
	for _, want := range []string{"x1", "unchanged", "error: "} {
		if !strings.Contains(out, want) {
			t.Errorf("table output lacks %q:\n%s", want, out)
		}
	}
	if _, err := run("-b", file, "preview"); err == nil {
		t.Error("both a name and -b accepted")
	}
}
