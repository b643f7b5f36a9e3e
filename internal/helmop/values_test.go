package helmop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
	"github.com/fleetgo/fleet/internal/testenv/helmrepo"
)

// A HelmOp's Bundle is written like any other: its Helm values (root and
// per target) go to the Bundle's values Secret, the Bundle keeps their hash.
func TestHelmOpBundleValuesInSecret(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "values")
	repo := helmrepo.New(t, helmrepo.Options{})
	repo.Publish(t, helmrepo.Chart(t, "db", "1.0.0"))
	gm := func(m map[string]interface{}) *fleet.GenericMap { return &fleet.GenericMap{Data: m} }
	op := &fleet.HelmOp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Spec: fleet.HelmOpSpec{BundleSpec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{
				Helm: &fleet.HelmOptions{Repo: repo.URL, Chart: "db", Version: "1.0.0", Values: gm(map[string]interface{}{"password": "s3cret"})},
			},
			Targets: []fleet.BundleTarget{{Name: "prod", ClusterSelector: &metav1.LabelSelector{},
				BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Values: gm(map[string]interface{}{"password": "pr0d"})}}}},
		}},
	}
	if err := env.Client.Create(ctx, op); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error {
		b := bundleOf(t, ns, "db")
		if b == nil {
			return fmt.Errorf("no bundle")
		}
		raw, err := json.Marshal(b)
		if err != nil {
			return err
		}
		if strings.Contains(string(raw), "s3cret") || strings.Contains(string(raw), "pr0d") || b.Spec.ValuesHash == "" {
			return fmt.Errorf("bundle values not moved out: valuesHash %q", b.Spec.ValuesHash)
		}
		sec := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: b.Name}, sec); err != nil {
			return err
		}
		if sec.Type != fleet.SecretTypeBundleValues || apply.HashValues(sec.Data) != b.Spec.ValuesHash ||
			string(sec.Data[apply.RootValuesKey]) != `{"password":"s3cret"}` || string(sec.Data["prod"]) != `{"password":"pr0d"}` {
			return fmt.Errorf("values Secret type %s keys %d", sec.Type, len(sec.Data))
		}
		return nil
	})
}
