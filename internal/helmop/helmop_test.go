package helmop_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/helmop"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
	"github.com/fleetgo/fleet/internal/testenv/helmrepo"
)

func chartContent(b *fleet.Bundle, suffix string) string {
	for _, r := range b.Spec.Resources {
		if strings.HasSuffix(r.Name, suffix) {
			return r.Content
		}
	}
	return ""
}

// TestHelmOpFollowsChartVersions: a HelmOp with a version range deploys the
// newest matching chart as one Bundle, picks up a newer release by polling,
// ignores one outside the range, and stops polling at an exact version.
func TestHelmOpFollowsChartVersions(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "versions")
	repo := helmrepo.New(t, helmrepo.Options{})
	repo.Publish(t, helmrepo.Chart(t, "web", "1.0.0"))

	op := &fleet.HelmOp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Labels: map[string]string{"team": "blue"}},
		Spec: fleet.HelmOpSpec{
			BundleSpec: fleet.BundleSpec{
				BundleDeploymentOptions: fleet.BundleDeploymentOptions{
					DefaultNamespace: "web",
					Helm: &fleet.HelmOptions{Repo: repo.URL, Chart: "web", Version: "^1.0.0",
						Values: &fleet.GenericMap{Data: map[string]interface{}{"greeting": "hi"}}},
				},
				Targets: []fleet.BundleTarget{{Name: "prod", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}},
			},
			Labels:          map[string]string{"app": "web"},
			PollingInterval: &metav1.Duration{Duration: 1e9},
		},
	}
	if err := env.Client.Create(ctx, op); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error {
		b := bundleOf(t, ns, "web")
		if b == nil {
			return fmt.Errorf("no bundle")
		}
		if b.Name != "web" || b.Labels["app"] != "web" || b.Labels["team"] != "blue" {
			return fmt.Errorf("bundle %s labels %v", b.Name, b.Labels)
		}
		if b.Spec.Helm == nil || b.Spec.Helm.Version != "1.0.0" || b.Spec.Helm.Repo != "" || !strings.Contains(chartContent(b, "templates/cm.yaml"), "version: 1.0.0") {
			return fmt.Errorf("bundle helm %+v", b.Spec.Helm)
		}
		if b.Spec.DefaultNamespace != "web" || len(b.Spec.Targets) != 1 || b.Spec.Targets[0].Name != "prod" {
			return fmt.Errorf("bundle options %+v targets %+v", b.Spec.BundleDeploymentOptions, b.Spec.Targets)
		}
		got := getOp(t, ns, "web")
		if got.Status.Version != "1.0.0" || got.Status.ObservedGeneration != got.Generation || got.Status.LastPollingTime == nil {
			return fmt.Errorf("status %+v", got.Status)
		}
		for _, typ := range []string{fleet.ConditionAccepted, fleet.ConditionPolled, fleet.ConditionReady} {
			if c := condition(got, typ); c == nil || c.Status != metav1.ConditionTrue {
				return fmt.Errorf("%s = %+v", typ, c)
			}
		}
		return nil
	})

	// A new release in range rolls out by polling; one outside does not.
	repo.Publish(t, helmrepo.Chart(t, "web", "2.0.0"))
	repo.Publish(t, helmrepo.Chart(t, "web", "1.1.0"))
	fleettest.Eventually(t, timeout, func() error {
		b := bundleOf(t, ns, "web")
		if b.Spec.Helm.Version != "1.1.0" || !strings.Contains(chartContent(b, "templates/cm.yaml"), "version: 1.1.0") {
			return fmt.Errorf("bundle at %s", b.Spec.Helm.Version)
		}
		if v := getOp(t, ns, "web").Status.Version; v != "1.1.0" {
			return fmt.Errorf("status version %s", v)
		}
		return nil
	})

	// An exact version is deployed as asked and not polled.
	patchOp(t, ns, "web", func(o *fleet.HelmOp) { o.Spec.Helm.Version = "2.0.0" })
	fleettest.Eventually(t, timeout, func() error {
		if v := bundleOf(t, ns, "web").Spec.Helm.Version; v != "2.0.0" {
			return fmt.Errorf("bundle at %s", v)
		}
		c := condition(getOp(t, ns, "web"), fleet.ConditionPolled)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "PollingDisabled" {
			return fmt.Errorf("polled = %+v", c)
		}
		return nil
	})
	requests := repo.Requests()
	repo.Publish(t, helmrepo.Chart(t, "web", "2.0.1"))
	// Other HelmOps' polls come and go; this one must not ask again.
	fleettest.Consistently(t, 3e9, func() error {
		if n := repo.Requests(); n != requests {
			return fmt.Errorf("%d requests after polling stopped", n-requests)
		}
		return nil
	})

	// The events name the versions deployed.
	fleettest.Eventually(t, timeout, func() error {
		var evs eventsv1.EventList
		if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		var notes []string
		for _, e := range evs.Items {
			if e.Regarding.Name == "web" && e.Reason == "ChartVersion" {
				notes = append(notes, e.Note)
			}
		}
		joined := strings.Join(notes, ";")
		for _, v := range []string{"1.0.0", "1.1.0", "2.0.0"} {
			if !strings.Contains(joined, "version "+v) {
				return fmt.Errorf("events %q lack %s", joined, v)
			}
		}
		return nil
	})

	// A Bundle deleted by hand comes back.
	if err := env.Client.Delete(ctx, bundleOf(t, ns, "web")); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error {
		b := bundleOf(t, ns, "web")
		if b == nil || b.DeletionTimestamp != nil || b.Spec.Helm.Version != "2.0.0" {
			return fmt.Errorf("bundle %v", b)
		}
		return nil
	})

	// Deleting the HelmOp deletes its Bundle.
	if err := env.Client.Delete(ctx, getOp(t, ns, "web")); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error {
		if b := bundleOf(t, ns, "web"); b != nil {
			return fmt.Errorf("bundle still there")
		}
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &fleet.HelmOp{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("helmop: %v", err)
		}
		return nil
	})
}

// TestHelmOpBadInput: each bad input is reported on the status, never
// deletes what was deployed, and recovers once fixed.
func TestHelmOpBadInput(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "bad")
	repo := helmrepo.New(t, helmrepo.Options{Username: "fleet", Password: "s3cr3t-pa55"})
	repo.Publish(t, helmrepo.Chart(t, "api", "1.0.0"))

	// A missing credentials Secret: not accepted, no bundle.
	op := &fleet.HelmOp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api"},
		Spec: fleet.HelmOpSpec{
			BundleSpec:      fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Repo: repo.URL, Chart: "api", Version: "1.x"}}},
			HelmSecretName:  "charts",
			PollingInterval: &metav1.Duration{Duration: 1e9},
		},
	}
	if err := env.Client.Create(ctx, op); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error {
		got := getOp(t, ns, "api")
		c := condition(got, fleet.ConditionAccepted)
		if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, `helm secret "charts" not found`) {
			return fmt.Errorf("accepted = %+v", c)
		}
		if r := condition(got, fleet.ConditionReady); r == nil || r.Status != metav1.ConditionFalse {
			return fmt.Errorf("ready = %+v", r)
		}
		return nil
	})
	if b := bundleOf(t, ns, "api"); b != nil {
		t.Fatalf("bundle written without credentials")
	}

	// The Secret appears: the next retry deploys.
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "charts"},
		Data: map[string][]byte{"username": []byte("fleet"), "password": []byte("s3cr3t-pa55")}}
	if err := env.Client.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error {
		b := bundleOf(t, ns, "api")
		if b == nil || b.Spec.Helm.Version != "1.0.0" {
			return fmt.Errorf("bundle %v", b)
		}
		if c := condition(getOp(t, ns, "api"), fleet.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("ready = %+v", c)
		}
		return nil
	})

	// The repository goes away: the error is on the status, the bundle stays.
	repo.Close()
	fleettest.Eventually(t, timeout, func() error {
		got := getOp(t, ns, "api")
		c := condition(got, fleet.ConditionReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "BuildFailed" || !strings.Contains(c.Message, repo.URL) {
			return fmt.Errorf("ready = %+v", c)
		}
		if a := condition(got, fleet.ConditionAccepted); a == nil || a.Status != metav1.ConditionTrue {
			return fmt.Errorf("an unreachable repository is not a bad spec: accepted = %+v", a)
		}
		return nil
	})
	if b := bundleOf(t, ns, "api"); b == nil || b.Spec.Helm.Version != "1.0.0" || b.DeletionTimestamp != nil {
		t.Fatalf("the failure touched the bundle: %+v", b)
	}

	// A chart that does not exist, and a spec with no chart at all.
	other := helmrepo.New(t, helmrepo.Options{})
	other.Publish(t, helmrepo.Chart(t, "db", "1.0.0"))
	for name, h := range map[string]*fleet.HelmOptions{
		"missing": {Repo: other.URL, Chart: "nope"},
		"nochart": {Repo: other.URL},
		"local":   {Chart: "./charts/db"},
	} {
		op := &fleet.HelmOp{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: fleet.HelmOpSpec{BundleSpec: fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: h}}}}
		if err := env.Client.Create(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	fleettest.Eventually(t, timeout, func() error {
		for name, want := range map[string]string{
			"missing": `chart "nope" not found`,
			"nochart": "spec.helm.chart is required",
			"local":   "needs a chart from a repository",
		} {
			c := condition(getOp(t, ns, name), fleet.ConditionReady)
			if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, want) {
				return fmt.Errorf("%s: ready = %+v", name, c)
			}
			if bundleOf(t, ns, name) != nil {
				return fmt.Errorf("%s: bundle written", name)
			}
		}
		return nil
	})

	// No credential reached the status or the events.
	var evs eventsv1.EventList
	if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if strings.Contains(e.Note, "s3cr3t") {
			t.Errorf("event leaks the password: %s", e.Note)
		}
	}
	for _, name := range []string{"api", "missing", "nochart", "local"} {
		for _, c := range getOp(t, ns, name).Status.Conditions {
			if strings.Contains(c.Message, "s3cr3t") {
				t.Errorf("%s condition %s leaks the password", name, c.Type)
			}
		}
	}
}

// TestHelmOpInvalidVersion: a helm.version that is neither a version nor
// a semver constraint is a spec error (Accepted=False, InvalidSpec,
// Stalled), not a transient failure retried as Reconciling, whatever the
// chart source; the Bundle deployed before stays.
func TestHelmOpInvalidVersion(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "badversion")
	repo := helmrepo.New(t, helmrepo.Options{})
	tgz := helmrepo.Chart(t, "web", "1.0.0")
	repo.Publish(t, tgz)
	repo.PutFile("direct/web-1.0.0.tgz", tgz)

	op := &fleet.HelmOp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: fleet.HelmOpSpec{BundleSpec: fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{
			Helm: &fleet.HelmOptions{Repo: repo.URL, Chart: "web", Version: "1.x"}}}},
	}
	if err := env.Client.Create(ctx, op); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, func() error {
		if b := bundleOf(t, ns, "web"); b == nil || b.Spec.Helm.Version != "1.0.0" {
			return fmt.Errorf("bundle %v", b)
		}
		return nil
	})
	invalid := func(name, version string) func() error {
		return func() error {
			got := getOp(t, ns, name)
			for typ, want := range map[string]metav1.ConditionStatus{
				fleet.ConditionAccepted: metav1.ConditionFalse, fleet.ConditionStalled: metav1.ConditionTrue,
				fleet.ConditionReconciling: metav1.ConditionFalse, fleet.ConditionReady: metav1.ConditionFalse,
			} {
				c := condition(got, typ)
				if c == nil || c.Status != want || c.Reason != helmop.ReasonInvalidSpec || c.ObservedGeneration != got.Generation {
					return fmt.Errorf("%s = %+v, want %s/%s", typ, c, want, helmop.ReasonInvalidSpec)
				}
			}
			if c := condition(got, fleet.ConditionAccepted); !strings.Contains(c.Message, fmt.Sprintf("%q", version)) {
				return fmt.Errorf("accepted message %q does not name the version", c.Message)
			}
			return nil
		}
	}
	for _, version := range []string{"1.x.y.z", ">= foo"} {
		patchOp(t, ns, "web", func(op *fleet.HelmOp) { op.Spec.Helm.Version = version })
		fleettest.Eventually(t, timeout, invalid("web", version))
		if b := bundleOf(t, ns, "web"); b == nil || b.Spec.Helm.Version != "1.0.0" || b.DeletionTimestamp != nil {
			t.Fatalf("version %q touched the bundle: %+v", version, b)
		}
	}

	// A chart given by URL is checked the same way.
	url := &fleet.HelmOp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "url"},
		Spec: fleet.HelmOpSpec{BundleSpec: fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{
			Helm: &fleet.HelmOptions{Chart: repo.URL + "/direct/web-1.0.0.tgz", Version: ">= foo"}}}},
	}
	if err := env.Client.Create(ctx, url); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, timeout, invalid("url", ">= foo"))
	if b := bundleOf(t, ns, "url"); b != nil {
		t.Fatalf("bundle written for an invalid version: %+v", b.Spec.Helm)
	}

	// Fixed: deployed again.
	patchOp(t, ns, "web", func(op *fleet.HelmOp) { op.Spec.Helm.Version = "1.0.0" })
	fleettest.Eventually(t, timeout, func() error {
		if c := condition(getOp(t, ns, "web"), fleet.ConditionAccepted); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("accepted = %+v", c)
		}
		return nil
	})
}

func patchOp(t *testing.T, ns, name string, mutate func(*fleet.HelmOp)) {
	t.Helper()
	fleettest.Eventually(t, timeout, func() error {
		op := getOp(t, ns, name)
		mutate(op)
		return env.Client.Update(context.Background(), op)
	})
}
