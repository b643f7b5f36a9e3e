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

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
	"github.com/fleetgo/fleet/internal/cli"
	"github.com/fleetgo/fleet/internal/controller/bundle"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// deployedValues reads the values of a deployment from its values Secret,
// "" for a deployment without values.
func deployedValues(ctx context.Context, bd *fleet.BundleDeployment) (map[string]interface{}, error) {
	if bd.Spec.ValuesHash == "" {
		return nil, nil
	}
	sec := &corev1.Secret{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: bd.Namespace, Name: bd.Name}, sec); err != nil {
		return nil, err
	}
	if bundle.ValuesHash(sec.Data[bundle.ValuesKey]) != bd.Spec.ValuesHash {
		return nil, fmt.Errorf("values Secret of %s/%s does not match its valuesHash", bd.Namespace, bd.Name)
	}
	var v map[string]interface{}
	return v, json.Unmarshal(sec.Data[bundle.ValuesKey], &v)
}

// valuesOn waits until the bundle's deployments on the given clusters carry
// exactly want[cluster] as their values and returns the deployments.
func valuesOn(t *testing.T, ctx context.Context, ws, name string, want map[string]map[string]interface{}) map[string]*fleet.BundleDeployment {
	t.Helper()
	var bds map[string]*fleet.BundleDeployment
	eventually(t, 60*time.Second, func() error {
		var err error
		if bds, err = bundleDeployments(ctx, ws, name); err != nil {
			return err
		}
		if len(bds) != len(want) {
			return fmt.Errorf("deployments on %v, want %d", sortedKeys(bds), len(want))
		}
		for cl, w := range want {
			bd := bds[cl]
			if bd == nil {
				return fmt.Errorf("no deployment on %s", cl)
			}
			got, err := deployedValues(ctx, bd)
			if err != nil {
				return err
			}
			if fmt.Sprint(got) != fmt.Sprint(w) {
				return fmt.Errorf("values on %s: %v, want %v", cl, got, w)
			}
		}
		return nil
	})
	return bds
}

// Values written by fleet apply live in the bundle's values Secret, and the
// manager still gives every deployment its merged values, follows changes,
// and leaks them into no Bundle, deployment or event.
func TestValuesFromBundleSecret(t *testing.T) {
	ctx := context.Background()
	ws := "ws-values"
	createNamespace(t, ctx, ws, nil)
	prod := newCluster(t, ctx, ws, "vp", map[string]string{"env": "prod"}, time.Second)
	dev := newCluster(t, ctx, ws, "vd", map[string]string{"env": "dev"}, time.Second)
	dir := t.TempDir()
	write := func(name, content string) {
		if name == "fleet.yaml" {
			content = "name: vals\n" + content // not named after the temporary directory
		}
		must(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	fleettest.WriteValuesBundle(t, dir, "name: vals\n"+fleettest.ValuesFleetYAML)
	fleetApply := func() {
		t.Helper()
		root := cli.NewRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs([]string{"--kubeconfig", env.Kubeconfig, "-n", ws, "apply", "vals", dir})
		if err := root.ExecuteContext(ctx); err != nil {
			t.Fatalf("fleet apply: %v\n%s", err, out.String())
		}
		if strings.Contains(out.String(), "s3cret") {
			t.Errorf("fleet apply printed a value: %s", out.String())
		}
	}
	fleetApply()
	b := &fleet.Bundle{}
	must(t, env.Client.Get(ctx, types.NamespacedName{Namespace: ws, Name: "vals"}, b))
	if b.Spec.ValuesHash == "" || (b.Spec.Helm != nil && b.Spec.Helm.Values != nil) {
		t.Fatalf("the Bundle keeps its values: hash %q helm %+v", b.Spec.ValuesHash, b.Spec.Helm)
	}

	bds := valuesOn(t, ctx, ws, "vals", map[string]map[string]interface{}{
		"vp": {"password": "pr0d-s3cret", "replicas": float64(2), "apiKey": "k3y"},
		"vd": {"password": "s3cret", "replicas": float64(2), "apiKey": "k3y"},
	})
	// The values are nowhere but in the Secrets: not in the Bundle (status
	// included), the deployments or events.
	eventually(t, 30*time.Second, func() error {
		must(t, env.Client.Get(ctx, types.NamespacedName{Namespace: ws, Name: "vals"}, b))
		if c := meta.FindStatusCondition(b.Status.Conditions, fleet.ConditionReady); c == nil || c.Reason == bundle.ReasonValuesPending {
			return fmt.Errorf("ready condition %+v", c)
		}
		return nil
	})
	var objs []interface{}
	objs = append(objs, b)
	for _, bd := range bds {
		objs = append(objs, bd)
	}
	for _, n := range []string{ws, prod.Status.Namespace, dev.Status.Namespace} {
		events := &corev1.EventList{}
		must(t, env.Client.List(ctx, events, client.InNamespace(n)))
		objs = append(objs, events)
	}
	for _, o := range objs {
		raw, err := json.Marshal(o)
		must(t, err)
		for _, secret := range []string{"s3cret", "k3y"} {
			if strings.Contains(string(raw), secret) {
				t.Errorf("%q readable in %s", secret, raw[:min(len(raw), 200)])
			}
		}
	}

	// `fleet target` previews with the values of the Secret, as the
	// manager deploys: nothing would change.
	root := cli.NewRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"--kubeconfig", env.Kubeconfig, "-n", ws, "target", "vals", "-o", "json"})
	must(t, root.ExecuteContext(ctx))
	var rows []cli.TargetRow
	must(t, json.Unmarshal(out.Bytes(), &rows))
	for _, r := range rows {
		cl := strings.TrimPrefix(r.Cluster, ws+"/")
		if r.Action != "unchanged" || bds[cl] == nil || r.DeploymentID != bds[cl].Spec.DeploymentID {
			t.Errorf("fleet target row %+v, want deployment %s unchanged", r, cl)
		}
	}
	if len(rows) != 2 {
		t.Errorf("fleet target: %d rows", len(rows))
	}

	// A new value reaches the deployments.
	write("fleet.yaml", strings.Replace(fleettest.ValuesFleetYAML, "password: s3cret", "password: n3w", 1))
	fleetApply()
	valuesOn(t, ctx, ws, "vals", map[string]map[string]interface{}{
		"vp": {"password": "pr0d-s3cret", "replicas": float64(2), "apiKey": "k3y"},
		"vd": {"password": "n3w", "replicas": float64(2), "apiKey": "k3y"},
	})

	// No values at all: the deployments have none either.
	write("fleet.yaml", "targetCustomizations:\n- name: all\n  clusterSelector: {}\n")
	fleetApply()
	valuesOn(t, ctx, ws, "vals", map[string]map[string]interface{}{"vp": nil, "vd": nil})
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ws, Name: "vals"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("bundle values Secret after the values went: %v", err)
	}

	// A Bundle created with its values in the spec deploys them as ever.
	direct := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "direct"}}
	direct.Spec.Resources = resources("kind: ConfigMap\n")
	direct.Spec.Helm = &fleet.HelmOptions{Values: &fleet.GenericMap{Data: map[string]interface{}{"password": "d1rect"}}}
	direct.Spec.Targets = []fleet.BundleTarget{{Name: "dev", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}}}
	must(t, env.Client.Create(ctx, direct))
	valuesOn(t, ctx, ws, "direct", map[string]map[string]interface{}{"vd": {"password": "d1rect"}})
}

// A Bundle whose valuesHash names values its Secret does not hold (yet)
// gets no deployments, says so on its Ready condition, and deploys once the
// Secret holds them.
func TestValuesPendingUntilSecretMatches(t *testing.T) {
	ctx := context.Background()
	ws := "ws-values-pending"
	createNamespace(t, ctx, ws, nil)
	newCluster(t, ctx, ws, "pc", map[string]string{"env": "dev"}, time.Second)
	data := map[string][]byte{apply.RootValuesKey: []byte(`{"password":"s3cret"}`)}
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "late"}}
	b.Spec.Resources = resources("kind: ConfigMap\n")
	b.Spec.Targets = []fleet.BundleTarget{{Name: "all", ClusterSelector: &metav1.LabelSelector{}}}
	b.Spec.ValuesHash = apply.HashValues(data)
	must(t, env.Client.Create(ctx, b))

	pending := func(want string) {
		t.Helper()
		eventually(t, 30*time.Second, func() error {
			got := &fleet.Bundle{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(b), got); err != nil {
				return err
			}
			c := meta.FindStatusCondition(got.Status.Conditions, fleet.ConditionReady)
			if c == nil || c.Reason != bundle.ReasonValuesPending || !strings.Contains(c.Message, want) || strings.Contains(c.Message, "s3cret") {
				return fmt.Errorf("ready condition %+v", c)
			}
			return nil
		})
		bds, err := bundleDeployments(ctx, ws, "late")
		must(t, err)
		if len(bds) != 0 {
			t.Fatalf("deployed without its values: %v", sortedKeys(bds))
		}
	}
	pending("not found")

	// The Secret with other values (an older write): still waiting.
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(b), b))
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "late", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: fleet.GroupVersion.String(), Kind: "Bundle", Name: "late", UID: b.UID, Controller: ptr(true),
		}}},
		Type: fleet.SecretTypeBundleValues,
		Data: map[string][]byte{apply.RootValuesKey: []byte(`{"password":"old"}`)},
	}
	must(t, env.Client.Create(ctx, sec))
	pending("does not hold the values")

	// The values arrive: the deployment follows with them.
	sec.Data = data
	must(t, env.Client.Update(ctx, sec))
	valuesOn(t, ctx, ws, "late", map[string]map[string]interface{}{"pc": {"password": "s3cret"}})
}

func ptr[T any](v T) *T { return &v }
