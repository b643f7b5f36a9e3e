package statusview

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var upstream *testenv.Cluster

func TestMain(m *testing.M) {
	flag.Parse()
	var err error
	upstream, err = testenv.Start(testenv.Options{Name: "statusview"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = upstream.Stop()
	os.Exit(code)
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run with -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (run with -update after checking):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestRenderSeededFleetInMemory(t *testing.T) {
	var out bytes.Buffer
	if err := Render(&out, Build(inMemory(seed())), RenderOptions{Now: seedNow}); err != nil {
		t.Fatal(err)
	}
	golden(t, "seeded.txt", out.Bytes())
}

// TestStatusOnceOverRealAPIServer writes the seeded fleet into a real
// manager API server, lists it the way `fleet status --once` does and
// expects the same picture as the golden file.
func TestStatusOnceOverRealAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := upstream.Client
	namespaces := map[string]bool{}
	for _, o := range seed() {
		namespaces[o.GetNamespace()] = true
	}
	for ns := range namespaces {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for _, o := range seed() {
		status := o.DeepCopyObject().(client.Object)
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
		status.SetResourceVersion(o.GetResourceVersion())
		status.SetUID(o.GetUID())
		if err := c.Status().Update(ctx, status); err != nil {
			t.Fatalf("writing status of %T %s: %v", o, o.GetName(), err)
		}
	}
	f, err := Load(ctx, c, fleet.DefaultWorkspace)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Render(&out, Build(f), RenderOptions{Now: seedNow}); err != nil {
		t.Fatal(err)
	}
	golden(t, "seeded.txt", out.Bytes())

	// All namespaces gives the same picture here: nothing lives elsewhere.
	all, err := Load(ctx, c, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all.BundleDeployments) != len(f.BundleDeployments) || len(all.Clusters) != 2 {
		t.Errorf("listing all namespaces found %d bundledeployments and %d clusters, want %d and 2",
			len(all.BundleDeployments), len(all.Clusters), len(f.BundleDeployments))
	}
}

func TestAllReady(t *testing.T) {
	v := Build(inMemory(seed()))
	if v.AllReady() {
		t.Error("seeded fleet has failures but AllReady is true")
	}
	if ready, total := v.Counts(); ready != 2 || total != 7 {
		t.Errorf("Counts = %d/%d, want 2/7", ready, total)
	}
	ok := View{Groups: []Group{{State: "Ready", Columns: []string{"a", "b"}, Rows: []BundleRow{{Name: "x", Cells: []string{"Ready", NotTargeted}}}}}}
	if !ok.AllReady() {
		t.Error("a view whose only targeted cell is Ready is not AllReady")
	}
	if (View{}).AllReady() {
		t.Error("an empty view is AllReady")
	}
}

func TestClusterState(t *testing.T) {
	offline := []metav1.Condition{{Type: fleet.ConditionOffline, Status: metav1.ConditionTrue}}
	waiting := []metav1.Condition{{Type: fleet.ConditionOffline, Status: metav1.ConditionTrue, Reason: "WaitCheckIn"}}
	seen := fleet.AgentStatus{LastSeen: metav1.NewTime(seedNow)}
	for _, tc := range []struct {
		name string
		st   fleet.ClusterStatus
		want string
	}{
		{name: "never checked in, even if marked offline", st: fleet.ClusterStatus{Conditions: offline}, want: "WaitCheckIn"},
		{name: "offline condition wins over display", st: fleet.ClusterStatus{Agent: seen, Conditions: offline, Display: fleet.ClusterDisplay{State: "Ready"}}, want: "Offline"},
		// The first check-in has landed; the manager has not rolled it up.
		{name: "first check-in not yet rolled up", st: fleet.ClusterStatus{Agent: seen, Conditions: waiting, Display: fleet.ClusterDisplay{State: "WaitCheckIn"}}, want: "WaitCheckIn"},
		{name: "display state", st: fleet.ClusterStatus{Agent: seen, Display: fleet.ClusterDisplay{State: "Modified"}}, want: "Modified"},
		{name: "no display yet", st: fleet.ClusterStatus{Agent: seen}, want: "NotReady"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ClusterState(&fleet.Cluster{Status: tc.st}); got != tc.want {
				t.Errorf("ClusterState = %s, want %s", got, tc.want)
			}
		})
	}
}
