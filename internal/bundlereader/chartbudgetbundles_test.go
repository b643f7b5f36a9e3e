package bundlereader

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
)

// budgetBundles is a monorepo of n bundles b0 … b<n-1>, each installing
// chart, plus the chart given to bundle "big" when big is not empty.
func budgetBundles(n int, chart, big string) map[string]string {
	files := map[string]string{}
	for i := 0; i < n; i++ {
		files[fmt.Sprintf("b%d/fleet.yaml", i)] = "helm:\n  chart: " + chart + "\n"
	}
	if big != "" {
		files["big/fleet.yaml"] = "helm:\n  chart: " + big + "\n"
	}
	return files
}

// readAll reads every bundle of dir.
func readAll(dir string, limits Limits) ([]*fleet.Bundle, error) {
	return Read(context.Background(), "mono", dir, nil, Options{Limits: limits})
}

// wantChartInEveryBundle checks that each bundle carries its own copy of
// the chart's padded template: the bundles are complete, not short of
// the content the budget was released for.
func wantChartInEveryBundle(t *testing.T, bs []*fleet.Bundle, n int) {
	t.Helper()
	if len(bs) != n {
		t.Fatalf("got %d bundles, want %d", len(bs), n)
	}
	for _, b := range bs {
		if b.Spec.Helm == nil {
			t.Fatalf("bundle %s has no helm options", b.Name)
		}
		if _, ok := resourceNames(b)[b.Spec.Helm.Chart+"/templates/pad.yaml"]; !ok {
			t.Errorf("bundle %s: chart template missing: %v", b.Name, resourceNames(b))
		}
	}
}

// TestChartBudgetIsPerBundleNotPerRead: the chart download budget bounds
// what is held at once. A monorepo whose bundles each install a chart
// well within MaxTotalSize reads, although their charts together are far
// over it (each bundle's chart is dropped once the bundle is built); a
// single bundle whose chart alone is over it is still refused, with the
// error naming the budget and the bundle.
func TestChartBudgetIsPerBundleNotPerRead(t *testing.T) {
	const budget = 1 << 20
	small, big := paddedChart(t, "app", 300<<10), paddedChart(t, "huge", budget+(200<<10))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch req.URL.Path {
		case "/app-1.0.0.tgz":
			_, _ = w.Write(small)
		case "/huge-1.0.0.tgz":
			_, _ = w.Write(big)
		default:
			http.NotFound(w, req)
		}
	}))
	t.Cleanup(srv.Close)
	const n = 8 // 8 × 300 KiB: more than twice the budget

	bs, err := readAll(writeRepo(t, budgetBundles(n, srv.URL+"/app-1.0.0.tgz", "")), Limits{MaxTotalSize: budget})
	if err != nil {
		t.Fatalf("%d bundles each under the budget: %v", n, err)
	}
	wantChartInEveryBundle(t, bs, n)

	_, err = readAll(writeRepo(t, budgetBundles(n, srv.URL+"/app-1.0.0.tgz", srv.URL+"/huge-1.0.0.tgz")), Limits{MaxTotalSize: budget})
	if !errors.Is(err, ErrLimit) {
		t.Fatalf("err = %v, want ErrLimit for the bundle whose chart is over the budget", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "bundle big:") || !strings.Contains(msg, "exceed the limit of 1048576 bytes") {
		t.Errorf("err = %v, want the bundle and the budget named", err)
	}
}

// TestGitChartBudgetIsPerBundleNotPerRead is the same for charts checked
// out of a git repository, whose files are counted as they are read from
// the checkout.
func TestGitChartBudgetIsPerBundleNotPerRead(t *testing.T) {
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "charts")
	repo.Commit("master", map[string]string{
		"app/Chart.yaml":         "apiVersion: v2\nname: app\nversion: 1.0.0\n",
		"app/templates/pad.yaml": "# " + strings.Repeat("x", 300<<10) + "\n",
	})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	const n = 6 // 6 × 300 KiB: far over the budget

	bs, err := readAll(writeRepo(t, budgetBundles(n, "git::"+srv.URLFor(repo)+"//app", "")), Limits{MaxTotalSize: 1 << 20})
	if err != nil {
		t.Fatalf("%d bundles each under the budget: %v", n, err)
	}
	wantChartInEveryBundle(t, bs, n)
}
