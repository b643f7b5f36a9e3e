package helmop_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/helmop"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
	"github.com/fleetgo/fleet/internal/testenv/helmrepo"
)

func helmOp(ns, name, repo, chart, secret string) *fleet.HelmOp {
	return &fleet.HelmOp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: fleet.HelmOpSpec{
			BundleSpec:     fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Repo: repo, Chart: chart, Version: "1.0.0"}}},
			HelmSecretName: secret,
		},
	}
}

// waitRefused waits until the HelmOp is not accepted, stalled and not
// ready with a message containing s.
func waitRefused(t testing.TB, ns, name, s string) {
	t.Helper()
	fleettest.Eventually(t, timeout, func() error {
		got := getOp(t, ns, name)
		for typ, want := range map[string]metav1.ConditionStatus{
			fleet.ConditionAccepted: metav1.ConditionFalse, fleet.ConditionReady: metav1.ConditionFalse, fleet.ConditionStalled: metav1.ConditionTrue,
		} {
			c := condition(got, typ)
			if c == nil || c.Status != want || !strings.Contains(c.Message, s) {
				return fmt.Errorf("%s = %+v", typ, c)
			}
		}
		return nil
	})
}

func refusalEvents(t testing.TB, ns, name string) []string {
	t.Helper()
	var evs eventsv1.EventList
	if err := env.Client.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs.Items {
		if e.Regarding.Name == name && e.Type == corev1.EventTypeWarning && e.Reason == helmop.ReasonRestricted {
			out = append(out, e.Note)
		}
	}
	return out
}

// TestHelmOpPolicyChartPatterns: a chart no helmOp.allowedChartPatterns
// entry matches is refused before the repository is contacted, with a
// condition and one Warning event, and is not retried on a timer. Relaxing
// the Policy builds it at once; tightening it again refuses it but keeps
// the Bundle it deployed. The HelmOp is never changed.
func TestHelmOpPolicyChartPatterns(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "policy-chart")
	repo := helmrepo.New(t, helmrepo.Options{})
	repo.Publish(t, helmrepo.Chart(t, "api", "1.0.0"))
	policy := &fleet.Policy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "charts"},
		HelmOp:     &fleet.HelmOpPolicy{AllowedChartPatterns: []string{"web-.*"}},
	}
	if err := env.Client.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, helmOp(ns, "api", repo.URL, "api", "")); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, ns, "api", `spec.helm.chart "api" is not allowed by Policy charts: it matches none of helmOp.allowedChartPatterns ["web-.*"]`)
	fleettest.Eventually(t, timeout, func() error {
		if evs := refusalEvents(t, ns, "api"); len(evs) != 1 {
			return fmt.Errorf("events %q", evs)
		}
		return nil
	})
	// Not retried: the repository is never asked (the test controller's
	// retry backoff is at most 2s).
	fleettest.Consistently(t, 3*time.Second, func() error {
		if n := repo.Requests(); n != 0 {
			return fmt.Errorf("%d requests to the repository", n)
		}
		if b := bundleOf(t, ns, "api"); b != nil {
			return fmt.Errorf("bundle written")
		}
		return nil
	})

	// Relaxed: built at once, from the HelmOp as written.
	policy.HelmOp.AllowedChartPatterns = append(policy.HelmOp.AllowedChartPatterns, "api")
	if err := env.Client.Update(ctx, policy); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error {
		if b := bundleOf(t, ns, "api"); b == nil || b.Spec.Helm.Version != "1.0.0" {
			return fmt.Errorf("bundle %v", b)
		}
		if c := condition(getOp(t, ns, "api"), fleet.ConditionAccepted); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("accepted = %+v", c)
		}
		return nil
	})

	// Tightened again: refused, the deployed Bundle stays.
	policy.HelmOp.AllowedChartPatterns = []string{"web-.*"}
	if err := env.Client.Update(ctx, policy); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, ns, "api", "helmOp.allowedChartPatterns")
	fleettest.Consistently(t, 2*time.Second, func() error {
		if b := bundleOf(t, ns, "api"); b == nil || b.DeletionTimestamp != nil {
			return fmt.Errorf("a refusal deleted the bundle: %v", b)
		}
		return nil
	})
	if got := getOp(t, ns, "api"); got.Generation != 1 {
		t.Fatalf("HelmOp changed: generation %d", got.Generation)
	}
}

// TestHelmOpPolicySecretsAndDefaults: the Policy's defaultHelmSecretName
// and defaultServiceAccount are used for a HelmOp naming neither (the
// repository accepts only that Secret's credentials; the Bundle carries
// the service account) without being written into its spec; a
// helmSecretName outside allowedHelmSecretNames, or a repo matching no
// allowedHelmRepoPatterns, is refused, and the refusal does not quote the
// credentials of a repo URL.
func TestHelmOpPolicySecretsAndDefaults(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "policy-secret")
	repo := helmrepo.New(t, helmrepo.Options{Username: "fleet", Password: "pa55"})
	repo.Publish(t, helmrepo.Chart(t, "api", "1.0.0"))
	creds := map[string][]byte{"username": []byte("fleet"), "password": []byte("pa55")}
	for _, name := range []string{"team-charts", "admin-charts"} {
		if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: creds}); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Client.Create(ctx, &fleet.Policy{
		ObjectMeta:            metav1.ObjectMeta{Namespace: ns, Name: "tenant"},
		RequireServiceAccount: true,
		HelmOp: &fleet.HelmOpPolicy{
			DefaultServiceAccount: "tenant", DefaultHelmSecretName: "team-charts", AllowedHelmSecretNames: []string{"team-charts"},
			AllowedHelmRepoPatterns: []string{`http://127\.0\.0\.1:\d+`},
		},
	}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, helmOp(ns, "defaulted", repo.URL, "api", "")); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error {
		b := bundleOf(t, ns, "defaulted")
		if b == nil {
			return fmt.Errorf("no bundle; ready = %+v", condition(getOp(t, ns, "defaulted"), fleet.ConditionReady))
		}
		if b.Spec.ServiceAccount != "tenant" {
			return fmt.Errorf("bundle serviceAccount %q", b.Spec.ServiceAccount)
		}
		return nil
	})
	if got := getOp(t, ns, "defaulted"); got.Spec.HelmSecretName != "" || got.Spec.ServiceAccount != "" || got.Generation != 1 {
		t.Fatalf("HelmOp changed: generation %d, spec %+v", got.Generation, got.Spec)
	}

	if err := env.Client.Create(ctx, helmOp(ns, "admin", repo.URL, "api", "admin-charts")); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, ns, "admin", `helmSecretName "admin-charts" is not allowed by Policy tenant: helmOp.allowedHelmSecretNames are ["team-charts"]`)

	withCreds := "https://fleet:pa55w0rd-xyz@charts.example.com"
	if err := env.Client.Create(ctx, helmOp(ns, "elsewhere", withCreds, "api", "")); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, ns, "elsewhere", `spec.helm.repo "https://***@charts.example.com" is not allowed by Policy tenant`)
	if msg := condition(getOp(t, ns, "elsewhere"), fleet.ConditionReady).Message; strings.Contains(msg, "pa55w0rd-xyz") {
		t.Fatalf("condition quotes the password: %s", msg)
	}
	fleettest.Eventually(t, timeout, func() error {
		evs := refusalEvents(t, ns, "elsewhere")
		if len(evs) != 1 {
			return fmt.Errorf("events %q", evs)
		}
		if strings.Contains(evs[0], "pa55w0rd-xyz") {
			t.Fatalf("event quotes the password: %s", evs[0])
		}
		return nil
	})
	if b := bundleOf(t, ns, "admin"); b != nil {
		t.Fatalf("refused HelmOp got a bundle")
	}
}
