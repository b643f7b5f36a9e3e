package apply_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
	"github.com/fleetgo/fleet/internal/cli"
	"github.com/fleetgo/fleet/internal/testenv"
)

var up *testenv.Cluster

const ns = "apply-ws"

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	up, err = testenv.Start(testenv.Options{Name: "apply-up"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = up.Stop() }()
	if err := up.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// copyTree copies the example repository so the test can change it.
func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func fleetApply(t *testing.T, flags *cli.ApplyFlags, name string, paths ...string) (string, error) {
	t.Helper()
	g := &cli.Globals{Kubeconfig: up.Kubeconfig, Namespace: ns}
	var out, errOut bytes.Buffer
	err := cli.RunApply(context.Background(), g, flags, name, paths, strings.NewReader(""), &out, &errOut)
	return out.String(), err
}

func listBundles(t *testing.T, repo string) map[string]fleet.Bundle {
	t.Helper()
	list := &fleet.BundleList{}
	if err := up.Client.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{fleet.RepoLabel: repo}); err != nil {
		t.Fatal(err)
	}
	out := map[string]fleet.Bundle{}
	for _, b := range list.Items {
		out[b.Name] = b
	}
	return out
}

func sortedKeys(m map[string]fleet.Bundle) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestFleetApply runs `fleet apply` against a real API server: bundles are
// created, read back equal, not rewritten when nothing changed, updated on
// change, and pruned when their path goes away; bad input changes nothing.
func TestFleetApply(t *testing.T) {
	src, err := filepath.Abs("../bundlereader/testdata/repo")
	if err != nil {
		t.Fatal(err)
	}
	repo := copyTree(t, src)
	t.Chdir(repo)
	flags := &cli.ApplyFlags{Labels: map[string]string{fleet.RepoLabel: "corpus"}, Commit: "c1"}
	paths := []string{"simple", "overlays", "helm-local"}

	out, err := fleetApply(t, flags, "test", paths...)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	got := listBundles(t, "corpus")
	want := []string{"test-helm-local", "test-overlays", "test-simple", "test-simple-nested"}
	if keys := sortedKeys(got); strings.Join(keys, ",") != strings.Join(want, ",") {
		t.Fatalf("bundles %v, want %v (output %s)", keys, want, out)
	}
	// What is stored is what was built.
	opts, err := flags.ReadOptions(ns, nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	built, err := cli.ReadPaths(context.Background(), "test", paths, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range built {
		stored := got[b.Name]
		if len(stored.Spec.Resources) != len(b.Spec.Resources) || stored.Labels[fleet.CommitLabel] != "c1" ||
			stored.Spec.Targets[0].Name != b.Spec.Targets[0].Name {
			t.Errorf("bundle %s stored differently from what was built", b.Name)
		}
	}
	// Values are stored in the bundle's values Secret, not in the Bundle.
	helmLocal := got["test-helm-local"]
	if v := storedValues(t, &helmLocal)[apply.RootValuesKey]["size"]; v != "small" {
		t.Errorf("valuesFiles not merged into stored values: size = %v", v)
	}

	// Unchanged: no write at all.
	out, err = fleetApply(t, flags, "test", paths...)
	if err != nil {
		t.Fatal(err)
	}
	again := listBundles(t, "corpus")
	for name, b := range got {
		if again[name].ResourceVersion != b.ResourceVersion {
			t.Errorf("bundle %s rewritten although unchanged (resourceVersion %s -> %s)", name, b.ResourceVersion, again[name].ResourceVersion)
		}
	}
	if strings.Count(out, "unchanged") != 4 {
		t.Errorf("output %q, want 4 unchanged", out)
	}

	// A change updates only the affected bundle.
	if err := os.WriteFile(filepath.Join(repo, "overlays", "cm.yaml"), []byte("kind: ConfigMap\nmetadata:\n  name: changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := fleetApply(t, flags, "test", paths...); err != nil {
		t.Fatal(err)
	}
	changed := listBundles(t, "corpus")
	if changed["test-overlays"].ResourceVersion == again["test-overlays"].ResourceVersion {
		t.Error("changed bundle was not updated")
	}
	if changed["test-simple"].ResourceVersion != again["test-simple"].ResourceVersion {
		t.Error("unchanged bundle was rewritten")
	}

	// A bundle of another repository is never pruned.
	other := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: ns, Labels: map[string]string{fleet.RepoLabel: "other"}},
		Spec: fleet.BundleSpec{Resources: []fleet.BundleResource{{Name: "a.yaml", Content: "kind: A\n"}}}}
	if err := up.Client.Create(context.Background(), other); err != nil {
		t.Fatal(err)
	}

	// Bad input: an error, and nothing deleted or changed.
	if err := os.WriteFile(filepath.Join(repo, "helm-local", "fleet.yaml"), []byte("helm: [broken"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := fleetApply(t, flags, "test", paths...); err == nil || !strings.Contains(err.Error(), "helm-local/fleet.yaml: invalid YAML") {
		t.Fatalf("broken fleet.yaml: err = %v", err)
	}
	for name, b := range listBundles(t, "corpus") {
		if b.ResourceVersion != changed[name].ResourceVersion {
			t.Errorf("bundle %s changed by a failed apply", name)
		}
	}
	if n := len(listBundles(t, "corpus")); n != 4 {
		t.Fatalf("%d bundles after a failed apply, want 4", n)
	}
	if err := os.WriteFile(filepath.Join(repo, "helm-local", "fleet.yaml"), []byte("helm:\n  chart: ./chart\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// Removing a path prunes its bundle.
	out, err = fleetApply(t, flags, "test", "simple", "helm-local")
	if err != nil {
		t.Fatal(err)
	}
	final := listBundles(t, "corpus")
	if keys := sortedKeys(final); strings.Join(keys, ",") != "test-helm-local,test-simple,test-simple-nested" {
		t.Errorf("after prune: %v (output %s)", keys, out)
	}
	if !strings.Contains(out, "bundle "+ns+"/test-overlays deleted") {
		t.Errorf("output %q does not report the pruned bundle", out)
	}
	if len(listBundles(t, "other")) != 1 {
		t.Error("a bundle of another repository was pruned")
	}
}

// TestApplyConcurrentConflicts: concurrent writers of the same bundles all
// succeed (conflicts are retried) and the last spec wins.
func TestApplyConcurrentConflicts(t *testing.T) {
	ctx := context.Background()
	mk := func(i int) []*fleet.Bundle {
		return []*fleet.Bundle{{ObjectMeta: metav1.ObjectMeta{Name: "race", Labels: map[string]string{fleet.RepoLabel: "race"}},
			Spec: fleet.BundleSpec{Resources: []fleet.BundleResource{{Name: "a.yaml", Content: fmt.Sprintf("n: %d\n", i)}}}}}
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = apply.Apply(ctx, up.Client, mk(i), apply.Options{Namespace: ns, PruneSelector: map[string]string{fleet.RepoLabel: "race"}})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("writer %d: %v", i, err)
		}
	}
	if err := apply.Apply(ctx, up.Client, mk(99), apply.Options{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	b := &fleet.Bundle{}
	if err := up.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "race"}, b); err != nil {
		t.Fatal(err)
	}
	if b.Spec.Resources[0].Content != "n: 99\n" {
		t.Errorf("content %q, want the last write", b.Spec.Resources[0].Content)
	}
}

// TestApplyManyInParallel writes more bundles than are written at once, one
// of them invalid: the others land, the result keeps the input order, the
// error names the invalid one, and nothing is pruned.
func TestApplyManyInParallel(t *testing.T) {
	ctx := context.Background()
	sel := map[string]string{fleet.RepoLabel: "many"}
	stale := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "many-stale", Labels: sel}}
	if err := up.Client.Create(ctx, stale); err != nil {
		t.Fatal(err)
	}
	var bundles []*fleet.Bundle
	var want []string
	for i := range 3 * apply.DefaultParallel {
		name := fmt.Sprintf("many-%02d", i)
		if i == 13 {
			name = "Many_Invalid" // not a DNS-1123 name: the API server refuses it
		} else {
			want = append(want, name)
		}
		bundles = append(bundles, &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: sel}})
	}
	res, err := apply.ApplyWithResult(ctx, up.Client, bundles, apply.Options{Namespace: ns, PruneSelector: sel})
	if err == nil || !strings.Contains(err.Error(), "Many_Invalid") {
		t.Fatalf("error %v, want one naming Many_Invalid", err)
	}
	if strings.Join(res.Created, ",") != strings.Join(want, ",") {
		t.Errorf("created %v, want %v", res.Created, want)
	}
	if err := up.Client.Get(ctx, client.ObjectKeyFromObject(stale), &fleet.Bundle{}); err != nil {
		t.Errorf("the stale bundle was pruned although a write failed: %v", err)
	}
	list := &fleet.BundleList{}
	if err := up.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels(sel)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != len(want)+1 {
		t.Errorf("%d bundles stored, want %d written plus the stale one", len(list.Items), len(want))
	}
}

// TestApplyRefusesAnotherOriginsBundle: two GitRepos (or a GitRepo and a
// HelmOp) that produce the same bundle name do not take each other's
// bundle over; the second gets an error naming the owner, the first's
// bundle keeps its content and labels, and pruning by the second's
// selector leaves it alone. An unlabelled bundle is still taken over.
func TestApplyRefusesAnotherOriginsBundle(t *testing.T) {
	ctx := context.Background()
	mk := func(labels map[string]string, content string) []*fleet.Bundle {
		return []*fleet.Bundle{{ObjectMeta: metav1.ObjectMeta{Name: "a-b-c", Labels: labels},
			Spec: fleet.BundleSpec{Resources: []fleet.BundleResource{{Name: "x.yaml", Content: content}}}}}
	}
	first := map[string]string{fleet.RepoLabel: "a-b"}
	if err := apply.Apply(ctx, up.Client, mk(first, "first\n"), apply.Options{Namespace: ns, PruneSelector: first}); err != nil {
		t.Fatal(err)
	}
	for _, other := range []map[string]string{{fleet.RepoLabel: "a"}, {fleet.HelmOpLabel: "a-b-c"}} {
		err := apply.Apply(ctx, up.Client, mk(other, "second\n"), apply.Options{Namespace: ns, PruneSelector: other})
		if !errors.Is(err, apply.ErrOwnedByOther) || !strings.Contains(err.Error(), fleet.RepoLabel+"=a-b") {
			t.Errorf("%v: error %v, want one naming the owner", other, err)
		}
		b := &fleet.Bundle{}
		if err := up.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "a-b-c"}, b); err != nil {
			t.Fatal(err)
		}
		if b.Labels[fleet.RepoLabel] != "a-b" || b.Spec.Resources[0].Content != "first\n" {
			t.Errorf("%v took the bundle over: labels %v content %q", other, b.Labels, b.Spec.Resources[0].Content)
		}
	}

	// A bundle applied without an origin label may be adopted.
	if err := apply.Apply(ctx, up.Client, []*fleet.Bundle{{ObjectMeta: metav1.ObjectMeta{Name: "loose"}}}, apply.Options{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	adopt := map[string]string{fleet.RepoLabel: "adopter"}
	if err := apply.Apply(ctx, up.Client, []*fleet.Bundle{{ObjectMeta: metav1.ObjectMeta{Name: "loose", Labels: adopt}}}, apply.Options{Namespace: ns, PruneSelector: adopt}); err != nil {
		t.Errorf("adopting an unlabelled bundle: %v", err)
	}
}
