package v1alpha1_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/testenv"
)

var upstream, other *testenv.Cluster

func TestMain(m *testing.M) {
	clusters, err := testenv.StartMany("crd", 2, testenv.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	upstream, other = clusters[0], clusters[1]
	code := m.Run()
	for _, c := range clusters {
		_ = c.Stop()
	}
	os.Exit(code)
}

func ns(t *testing.T, c client.Client, name string) string {
	t.Helper()
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return name
}

// TestEveryKindRoundTrips creates one fully populated object of every kind
// and reads it back field for field.
func TestEveryKindRoundTrips(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c := upstream.Client
	n := ns(t, c, "roundtrip")
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}
	opts := fleet.BundleDeploymentOptions{
		DefaultNamespace: "apps",
		Helm: &fleet.HelmOptions{
			Chart: "app", Repo: "https://charts.example.com", Version: "^1.2", ReleaseName: "my-app",
			Values:     &fleet.GenericMap{Data: map[string]interface{}{"replicas": float64(2), "nested": map[string]interface{}{"a": "b"}}},
			ValuesFrom: []fleet.ValuesFrom{{SecretKeyRef: &fleet.SecretKeySelector{Name: "s", Namespace: "n", Key: "values.yaml"}}},
			MaxHistory: 3, TimeoutSeconds: 30, Atomic: true, TemplateValues: map[string]string{"x": "${ .ClusterName }"},
		},
		Kustomize:           &fleet.KustomizeOptions{Dir: "overlays/dev"},
		YAML:                &fleet.YAMLOptions{Overlays: []string{"dev"}},
		Diff:                &fleet.DiffOptions{ComparePatches: []fleet.ComparePatch{{Kind: "Deployment", APIVersion: "apps/v1", Name: "x", JSONPointers: []string{"/spec/replicas"}}}},
		CorrectDrift:        &fleet.CorrectDrift{Enabled: true, Force: true},
		IgnoreOptions:       &fleet.IgnoreOptions{Conditions: []map[string]string{{"type": "Progressing"}}},
		NamespaceLabels:     map[string]string{"team": "a"},
		DownstreamResources: []fleet.DownstreamResource{{Kind: "Secret", Name: "creds"}},
		KeepResources:       true,
	}
	objs := []client.Object{
		&fleet.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "repo", Namespace: n}, Spec: fleet.GitRepoSpec{
			Repo: "https://git.example.com/r.git", Branch: "main", Paths: []string{"apps/*"},
			PollingInterval: &metav1.Duration{Duration: 30 * time.Second},
			Targets:         []fleet.GitTarget{{Name: "dev", ClusterSelector: sel}}, CorrectDrift: &fleet.CorrectDrift{Enabled: true},
		}},
		&fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "bundle", Namespace: n}, Spec: fleet.BundleSpec{
			BundleDeploymentOptions: opts,
			Resources:               []fleet.BundleResource{{Name: "cm.yaml", Content: "kind: ConfigMap"}},
			Targets:                 []fleet.BundleTarget{{Name: "dev", ClusterSelector: sel, DoNotDeploy: true}},
			TargetCustomizationMode: fleet.AllMatches,
			RolloutStrategy: &fleet.RolloutStrategy{MaxUnavailable: ptr.To(intstr.FromString("10%")),
				AutoPartitionSize: ptr.To(intstr.FromInt32(5)), AutoPartitionThreshold: ptr.To(100),
				Partitions: []fleet.Partition{{Name: "canary", ClusterGroup: "canary", MaxUnavailable: ptr.To(intstr.FromInt32(0))}}},
			DependsOn: []fleet.BundleRef{{Name: "base", AcceptedStates: []fleet.BundleState{fleet.Ready, fleet.Modified}}},
		}},
		&fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: "bd", Namespace: n}, Spec: fleet.BundleDeploymentSpec{
			Options: opts, StagedOptions: opts, DeploymentID: "s-abc:def", StagedDeploymentID: "s-abc:def",
		}},
		&fleet.Content{ObjectMeta: metav1.ObjectMeta{Name: "s-abc"}, Content: []byte{0x1f, 0x8b, 0}, SHA256Sum: "abc"},
		&fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: n, Labels: map[string]string{"env": "dev"}}, Spec: fleet.ClusterSpec{
			ClientID: "really-random", KubeConfigSecret: "kc", TemplateValues: &fleet.GenericMap{Data: map[string]interface{}{"region": "eu"}},
			AgentEnvVars: []corev1.EnvVar{{Name: "A", Value: "b"}},
		}},
		&fleet.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: n}, Spec: fleet.ClusterGroupSpec{Selector: sel}},
		&fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Name: "reg", Namespace: n}, Spec: fleet.ClusterRegistrationSpec{
			ClientID: "id", ClientRandom: "rnd", ClusterLabels: map[string]string{"env": "dev"}}},
		&fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: "tok", Namespace: n}, Spec: fleet.ClusterRegistrationTokenSpec{
			TTL: &metav1.Duration{Duration: 240 * time.Hour}}},
		&fleet.GitRepoRestriction{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: n}, DefaultServiceAccount: "sa",
			AllowedServiceAccounts: []string{"sa"}, AllowedRepoPatterns: []string{"^https://git.example.com/.*"}, AllowedTargetNamespaceSelector: sel},
		&fleet.BundleNamespaceMapping{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: n}, BundleSelector: sel, NamespaceSelector: sel},
		&fleet.Policy{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: n}, RequireServiceAccount: true,
			AllowedServiceAccounts: []string{"sa"}, AllowNamespaceCreation: true,
			GitRepo: &fleet.GitRepoPolicy{DefaultServiceAccount: "sa", DefaultClientSecretName: "git", AllowedClientSecretNames: []string{"git"},
				AllowedRepoPatterns: []string{"https://git.example.com/.*"}},
			HelmOp: &fleet.HelmOpPolicy{DefaultServiceAccount: "sa", DefaultHelmSecretName: "helm", AllowedHelmSecretNames: []string{"helm"},
				AllowedHelmRepoPatterns: []string{"https://charts.example.com"}, AllowedChartPatterns: []string{"app-.*"}}},
	}
	for _, o := range objs {
		want := o.DeepCopyObject().(client.Object)
		g.Expect(c.Create(ctx, o)).To(Succeed(), "%T", o)
		got := o.DeepCopyObject().(client.Object)
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(o), got)).To(Succeed())
		// Compare everything but server-populated metadata.
		want.SetResourceVersion(got.GetResourceVersion())
		want.SetUID(got.GetUID())
		want.SetCreationTimestamp(got.GetCreationTimestamp())
		want.SetGeneration(got.GetGeneration())
		want.SetManagedFields(got.GetManagedFields())
		want.GetObjectKind().SetGroupVersionKind(got.GetObjectKind().GroupVersionKind())
		g.Expect(got).To(Equal(want), "%T did not round-trip", o)
	}

	// Status subresources exist: a status write sticks, a spec write through
	// /status is ignored.
	cl := &fleet.Cluster{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: n, Name: "c1"}, cl)).To(Succeed())
	cl.Status.Display.ReadyBundles = "1/2"
	cl.Status.Agent.LastSeen = metav1.Now()
	g.Expect(c.Status().Update(ctx, cl)).To(Succeed())
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: n, Name: "c1"}, cl)).To(Succeed())
	g.Expect(cl.Status.Display.ReadyBundles).To(Equal("1/2"))
}

// TestInvalidObjectsAreRefused shows that bad values are refused at admission
// with a message naming the field.
func TestInvalidObjectsAreRefused(t *testing.T) {
	ctx := context.Background()
	c := upstream.Client
	n := ns(t, c, "invalid")
	cases := []struct {
		name    string
		obj     client.Object
		message string
	}{
		{"ttl banana", rawToken(n, "banana", "banana"), "spec.ttl"},
		{"empty repo", &fleet.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "empty", Namespace: n}}, "spec.repo"},
		{"bad polling interval", rawGitRepo(n, "interval", "every minute"), "spec.pollingInterval"},
		{"release name too long", &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "long", Namespace: n}, Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{ReleaseName: strings.Repeat("a", 60)}}}}, "spec.helm.releaseName"},
		{"release name pattern", &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "upper", Namespace: n}, Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{ReleaseName: "My_Release"}}}}, "spec.helm.releaseName"},
		{"rollout percentage", &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "pct", Namespace: n}, Spec: fleet.BundleSpec{
			RolloutStrategy: &fleet.RolloutStrategy{MaxUnavailable: ptr.To(intstr.FromString("lots%"))}}}, "spec.rolloutStrategy.maxUnavailable"},
		{"rollout negative", &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "neg", Namespace: n}, Spec: fleet.BundleSpec{
			RolloutStrategy: &fleet.RolloutStrategy{AutoPartitionSize: ptr.To(intstr.FromInt32(-1))}}}, "spec.rolloutStrategy.autoPartitionSize"},
		{"customization mode", &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "mode", Namespace: n}, Spec: fleet.BundleSpec{
			TargetCustomizationMode: "SomeMatches"}}, "spec.targetCustomizationMode"},
		{"accepted state", &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "state", Namespace: n}, Spec: fleet.BundleSpec{
			DependsOn: []fleet.BundleRef{{Name: "x", AcceptedStates: []fleet.BundleState{"Happy"}}}}}, "acceptedStates"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := c.Create(ctx, tc.obj)
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.message))
		})
	}
	// Valid durations, including "0" and a negative TTL (never expires), are
	// accepted.
	for i, ttl := range []string{"240h", "0", "-1h", "1h30m"} {
		g := NewWithT(t)
		g.Expect(c.Create(ctx, rawToken(n, fmt.Sprintf("ok-%d", i), ttl))).To(Succeed(), ttl)
	}
	// A negative helm.timeoutSeconds in a target customization turns the
	// bundle's timeout off (Rancher Fleet's merge), so it is accepted, as
	// Rancher's CRD accepts it; a negative maxHistory is not.
	g := NewWithT(t)
	neg := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "timeout-off", Namespace: n}, Spec: fleet.BundleSpec{
		BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{TimeoutSeconds: 300}},
		Targets:                 []fleet.BundleTarget{{Name: "edge", BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{TimeoutSeconds: -1}}}}}}
	g.Expect(c.Create(ctx, neg)).To(Succeed())
	hist := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "history", Namespace: n}, Spec: fleet.BundleSpec{
		BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{MaxHistory: -1}}}}
	err := c.Create(ctx, hist)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
}

// TestClustersAreIndependent proves two test clusters share nothing.
func TestClustersAreIndependent(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(upstream.Config.Host).NotTo(Equal(other.Config.Host))
	ns(t, upstream.Client, "only-upstream")
	g.Expect(upstream.Client.Create(ctx, &fleet.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Name: "solo", Namespace: "only-upstream"}})).To(Succeed())

	err := other.Client.Get(ctx, client.ObjectKey{Name: "only-upstream"}, &corev1.Namespace{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "namespace leaked to the other cluster: %v", err)
	err = other.Client.Get(ctx, client.ObjectKey{Namespace: "only-upstream", Name: "solo"}, &fleet.ClusterGroup{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "ClusterGroup leaked to the other cluster: %v", err)

	a, err := upstream.KubeSystemUID(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	b, err := other.KubeSystemUID(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(a).NotTo(Equal(b), "each cluster has its own identity")
}

// rolloutFields are the int-or-string fields of a rollout strategy, as paths
// under spec.rolloutStrategy.
var rolloutFields = []string{"maxUnavailable", "maxUnavailablePartitions", "autoPartitionSize", "partitions[0].maxUnavailable"}

// rawRolloutBundle is a Bundle whose rollout field (one of rolloutFields) is
// value, as a fleet.yaml's rolloutStrategy arrives at the API server.
func rawRolloutBundle(namespace, name, field string, value interface{}) *unstructured.Unstructured {
	rs := map[string]interface{}{}
	if f, ok := strings.CutPrefix(field, "partitions[0]."); ok {
		rs["partitions"] = []interface{}{map[string]interface{}{"name": "p", "clusterGroup": "g", f: value}}
	} else {
		rs[field] = value
	}
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "fleet.cattle.io/v1alpha1",
		"kind":       "Bundle",
		"metadata":   map[string]interface{}{"name": name, "namespace": namespace},
		"spec":       map[string]interface{}{"rolloutStrategy": rs},
	}}
}

// TestRolloutValuesAcceptRancherForms: rollout values take what Rancher
// Fleet takes, so a fleet.yaml written for it (maxUnavailable: "10") does
// not fail the GitRepo's sync: a quoted count, a fractional percentage and
// one above 100%. Negative, non-numeric and spaced values are refused with
// the field named.
func TestRolloutValuesAcceptRancherForms(t *testing.T) {
	ctx := context.Background()
	c := upstream.Client
	n := ns(t, c, "rollout-values")
	for i, field := range rolloutFields {
		for j, v := range []interface{}{"10", "12.5%", "150%", "0", "25%", int64(3)} {
			t.Run(fmt.Sprintf("%s=%v accepted", field, v), func(t *testing.T) {
				g := NewWithT(t)
				obj := rawRolloutBundle(n, fmt.Sprintf("ok-%d-%d", i, j), field, v)
				g.Expect(c.Create(ctx, obj, client.FieldValidation("Strict"))).To(Succeed())
				got := &fleet.Bundle{}
				g.Expect(c.Get(ctx, client.ObjectKeyFromObject(obj), got)).To(Succeed())
				rs := got.Spec.RolloutStrategy
				read := map[string]*intstr.IntOrString{"maxUnavailable": rs.MaxUnavailable,
					"maxUnavailablePartitions": rs.MaxUnavailablePartitions, "autoPartitionSize": rs.AutoPartitionSize}
				if len(rs.Partitions) == 1 {
					read["partitions[0].maxUnavailable"] = rs.Partitions[0].MaxUnavailable
				}
				g.Expect(read[field]).NotTo(BeNil())
				g.Expect(read[field].String()).To(Equal(fmt.Sprint(v)))
			})
		}
		for j, v := range []interface{}{"-1", "abc", "10 %", "-5%", "1.5", "%", ""} {
			t.Run(fmt.Sprintf("%s=%q refused", field, v), func(t *testing.T) {
				g := NewWithT(t)
				err := c.Create(ctx, rawRolloutBundle(n, fmt.Sprintf("bad-%d-%d", i, j), field, v))
				g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
				g.Expect(err.Error()).To(ContainSubstring("spec.rolloutStrategy." + field))
			})
		}
	}
}

// TestBundleHelmOpOptionsAccepted: a Bundle as Rancher Fleet's HelmOp
// controller writes it, with spec.helmOpOptions, is accepted under strict
// field validation (kubectl's default) and read back with the field.
func TestBundleHelmOpOptionsAccepted(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c := upstream.Client
	n := ns(t, c, "helmop-options")
	ca := []byte("-----BEGIN CERTIFICATE-----\n")
	obj := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "fleet.cattle.io/v1alpha1",
		"kind":       "Bundle",
		"metadata":   map[string]interface{}{"name": "from-rancher", "namespace": n},
		"spec": map[string]interface{}{
			"helm": map[string]interface{}{"chart": "app", "repo": "https://charts.example.com"},
			"helmOpOptions": map[string]interface{}{
				"helmOpSecretName":            "helm-creds",
				"helmOpInsecureSkipTLSVerify": true,
				"helmOpCABundle":              base64.StdEncoding.EncodeToString(ca),
			},
		},
	}}
	g.Expect(c.Create(ctx, obj, client.FieldValidation("Strict"))).To(Succeed())
	got := &fleet.Bundle{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(obj), got)).To(Succeed())
	g.Expect(got.Spec.HelmOpOptions).To(Equal(&fleet.BundleHelmOpOptions{
		SecretName: "helm-creds", InsecureSkipTLSverify: true, CABundle: ca,
	}))
}
