// Command apicost measures what single requests on BundleDeployments cost
// the API server, in CPU: it starts a real kube-apiserver and etcd with the
// Fleet CRDs, runs each kind of request N times (32 at a time) and prints
// the API server's CPU seconds per request, next to the same for the
// scale harness's floor object (a custom resource with one 3 KiB string).
// docs/scale-history.md ("Fifth pass") explains what the figures meant for the
// BundleDeployment's shape and the agent's status writes.
//
// With -profile DIR it also writes a CPU profile of the API server during
// each kind of request (DIR/<n>-<kind>.pprof), read with go tool pprof.
//
//	go run ./test/scale/apicost [-n 2000] [-namespaces 200] [-profile DIR]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/test/scale/harness"
)

func main() {
	n := flag.Int("n", 2000, "requests of each kind")
	namespaces := flag.Int("namespaces", 200, "cluster namespaces the BundleDeployments are spread over")
	profile := flag.String("profile", "", "directory for a CPU profile of the API server during each kind of request (`dir`)")
	flag.Parse()
	if *n < 1 || *namespaces < 1 {
		fmt.Fprintln(os.Stderr, "apicost: -n and -namespaces must be at least 1")
		os.Exit(2)
	}
	if err := run(*n, *namespaces, *profile); err != nil {
		fmt.Fprintln(os.Stderr, "apicost:", err)
		os.Exit(1)
	}
}

type bench struct {
	ctx context.Context
	c   client.Client
	pid int
	n   int
	// profile, when set, is the directory of the per-phase profiles.
	profile string
	cs      kubernetes.Interface
	phases  int
}

// phase runs f(0..n-1) with 32 in flight and prints the API server's CPU
// per request.
func (b *bench) phase(name string, f func(i int) error) error {
	b.phases++
	profiled := make(chan error, 1)
	startProfile := func() { profiled <- nil }
	if b.profile != "" {
		// The profile starts a tenth into the phase (its first requests may
		// wait, e.g. on admission's namespace cache) and lasts 2 s: a few
		// thousand samples at -n 2000, ending inside the phase.
		path := filepath.Join(b.profile, fmt.Sprintf("%d-%s.pprof", b.phases, slug(name)))
		startProfile = func() { go func() { profiled <- harness.APIServerProfile(b.ctx, b.cs, 2, path) }() }
	}
	c0, t0 := harness.CPUSeconds(b.pid), time.Now()
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := range b.n {
		if i == b.n/10 {
			startProfile()
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := f(i); err != nil {
				mu.Lock()
				first = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return fmt.Errorf("%s: %w", name, first)
	}
	if err := <-profiled; err != nil {
		return fmt.Errorf("%s: profile: %w", name, err)
	}
	time.Sleep(300 * time.Millisecond) // let watch delivery finish
	d := harness.CPUSeconds(b.pid) - c0
	fmt.Printf("%-40s %6.2f ms API server CPU per request (%d in %.1fs)\n", name, 1000*d/float64(b.n), b.n, time.Since(t0).Seconds())
	return nil
}

func run(n, namespaces int, profile string) error {
	c, err := testenv.Start(testenv.Options{Name: "apicost"})
	if err != nil {
		return err
	}
	defer func() { _ = c.Stop() }()
	if profile != "" {
		if err := os.MkdirAll(profile, 0o755); err != nil {
			return err
		}
	}
	b := &bench{ctx: context.Background(), c: c.Client, pid: c.APIServerPID(), n: n, profile: profile, cs: c.Clientset}
	ns := func(i int) string { return fmt.Sprintf("cluster-fleet-default-c%d", i%namespaces) }
	for i := range namespaces {
		if err := c.Client.Create(b.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns(i)}}); err != nil {
			return err
		}
	}
	bds := make([]*fleet.BundleDeployment, n)
	steps := []struct {
		name string
		f    func(i int) error
	}{
		{"BundleDeployment create", func(i int) error { bds[i] = deployment(ns(i), i/namespaces); return b.c.Create(b.ctx, bds[i]) }},
		{"first status, merge patch", func(i int) error {
			body, _ := json.Marshal(map[string]any{"status": readyStatus(bds[i], "r1")})
			return b.c.Status().Patch(b.ctx, bds[i], client.RawPatch(types.MergePatchType, body))
		}},
		{"next status, merge patch (as agents did)", func(i int) error {
			body, _ := json.Marshal(map[string]any{"status": readyStatus(bds[i], "r2")})
			return b.c.Status().Patch(b.ctx, bds[i], client.RawPatch(types.MergePatchType, body))
		}},
		{"next status, update (as agents do)", func(i int) error {
			bds[i].Status = readyStatus(bds[i], "r3")
			return b.c.Status().Update(b.ctx, bds[i])
		}},
		{"spec update (the manager's rollout)", func(i int) error {
			bds[i].Spec.DeploymentID += "x"
			return b.c.Update(b.ctx, bds[i])
		}},
		{"get from etcd", func(i int) error {
			return b.c.Get(b.ctx, client.ObjectKeyFromObject(bds[i]), &fleet.BundleDeployment{})
		}},
		// Since the twenty-seventh pass the manager's updates reset managedFields
		// (one empty entry), and the API server then tracks no field of
		// the deployment on later updates: these are a rollout's two writes
		// now.
		{"spec update, resetting managedFields", func(i int) error {
			bds[i].Spec.DeploymentID += "y"
			bds[i].ManagedFields = []metav1.ManagedFieldsEntry{{}}
			return b.c.Update(b.ctx, bds[i])
		}},
		{"next status, update, untracked", func(i int) error {
			bds[i].Status = readyStatus(bds[i], "r4")
			return b.c.Status().Update(b.ctx, bds[i])
		}},
		{"spec update, untracked (a rollout now)", func(i int) error {
			bds[i].Spec.DeploymentID += "z"
			bds[i].ManagedFields = []metav1.ManagedFieldsEntry{{}}
			return b.c.Update(b.ctx, bds[i])
		}},
		{"next status, update, untracked (again)", func(i int) error {
			bds[i].Status = readyStatus(bds[i], "r5")
			return b.c.Status().Update(b.ctx, bds[i])
		}},
	}
	for _, s := range steps {
		if err := b.phase(s.name, s.f); err != nil {
			return err
		}
	}
	got := &fleet.BundleDeployment{}
	if err := b.c.Get(b.ctx, client.ObjectKeyFromObject(bds[0]), got); err != nil {
		return err
	}
	all, _ := json.Marshal(got)
	mf, _ := json.Marshal(got.ManagedFields)
	fmt.Printf("%-40s %d bytes as JSON, managedFields %d\n", "a deployed BundleDeployment", len(all), len(mf))

	if err := harness.EnsureFloorCRD(b.ctx, c.Config); err != nil {
		return err
	}
	floor := make([]*unstructured.Unstructured, n)
	if err := b.phase("floor object create", func(i int) error {
		floor[i] = harness.FloorObject(harness.FloorCustomResource, ns(i), "apicost", 3*1024)
		floor[i].SetName(fmt.Sprintf("floor-%d", i/namespaces))
		return b.c.Create(b.ctx, floor[i])
	}); err != nil {
		return err
	}
	return b.phase("floor object merge patch (its answer)", func(i int) error {
		return b.c.Patch(b.ctx, floor[i], client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"ack":"1"}}}`)))
	})
}

// slug turns a phase's name into a file name: "next status, update (as
// agents do)" becomes "next-status-update".
func slug(name string) string {
	name, _, _ = strings.Cut(name, " (")
	return strings.ReplaceAll(strings.ReplaceAll(strings.ToLower(name), ", ", " "), " ", "-")
}

// deployment is shaped like one the manager writes: Fleet's labels, a
// deploymentID and staged copy, default options.
func deployment(ns string, i int) *fleet.BundleDeployment {
	id := "s-" + strings.Repeat("0123456789abcdef", 4) + ":" + strings.Repeat("f", 64)
	return &fleet.BundleDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("bundle-%d", i), Labels: map[string]string{
			fleet.BundleLabel: fmt.Sprintf("bundle-%d", i), fleet.BundleNamespaceLabel: "fleet-default", fleet.ManagedLabel: "true",
			fleet.ClusterLabel: strings.TrimPrefix(ns, "cluster-fleet-default-"), fleet.ClusterNamespaceLabel: "fleet-default",
			fleet.ContentNameLabel: id[:63]}},
		Spec: fleet.BundleDeploymentSpec{DeploymentID: id, StagedDeploymentID: id,
			Options: fleet.BundleDeploymentOptions{DefaultNamespace: "default"}, StagedOptions: fleet.BundleDeploymentOptions{DefaultNamespace: "default"}},
	}
}

// readyStatus is what an agent reports for a deployed bundle of five
// objects.
func readyStatus(bd *fleet.BundleDeployment, release string) fleet.BundleDeploymentStatus {
	st := fleet.BundleDeploymentStatus{AppliedDeploymentID: bd.Spec.DeploymentID, Release: release, Ready: true, NonModified: true,
		ResourceCounts: fleet.ResourceCounts{Ready: 5, DesiredReady: 5},
		Display:        fleet.BundleDeploymentDisplay{Deployed: "Yes", Monitored: "Yes", State: string(fleet.Ready)}}
	for k := range 5 {
		st.Resources = append(st.Resources, fleet.BundleDeploymentResource{Kind: "ConfigMap", APIVersion: "v1", Namespace: "sim1", Name: fmt.Sprintf("cm-%d", k)})
	}
	for _, t := range []string{fleet.ConditionInstalled, fleet.ConditionDeployed, fleet.ConditionMonitored, fleet.ConditionReady} {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: "Ready", ObservedGeneration: bd.Generation, LastTransitionTime: metav1.Now()})
	}
	return st
}
