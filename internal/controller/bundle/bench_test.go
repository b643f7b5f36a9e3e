package bundle_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// BenchmarkTargeting1000x10 measures, against the real API server, the time
// from creating 10 bundles to 10,000 BundleDeployments written (half of
// them with per-cluster templated Helm values, i.e. a values Secret each)
// and every Bundle status summarising its 1,000 targets. Cluster setup is
// not timed.
func BenchmarkTargeting1000x10(b *testing.B) {
	ctx := context.Background()
	const clusters, bundles = 1000, 10
	for iter := 0; iter < b.N; iter++ {
		b.StopTimer()
		ws := fmt.Sprintf("bench-%d-%d", time.Now().Unix(), iter)
		createNamespace(b, ctx, ws, nil)
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for i := 0; i < clusters; i++ {
			wg.Add(1)
			sem <- struct{}{}
			go func(i int) {
				defer wg.Done()
				defer func() { <-sem }()
				newCluster(b, ctx, ws, fmt.Sprintf("c-%04d", i), map[string]string{"env": []string{"dev", "prod"}[i%2]}, time.Second)
			}(i)
		}
		wg.Wait()
		b.StartTimer()
		start := time.Now()
		for j := 0; j < bundles; j++ {
			bu := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: fmt.Sprintf("b-%d", j)}}
			bu.Spec.Resources = resources(fmt.Sprintf("n: %d\n", j))
			bu.Spec.Targets = []fleet.BundleTarget{
				{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}, BundleDeploymentOptions: fleet.BundleDeploymentOptions{TargetNamespace: "prod"}},
				{ClusterSelector: &metav1.LabelSelector{}},
			}
			bu.Spec.TargetRestrictions = []fleet.BundleTargetRestriction{{ClusterSelector: &metav1.LabelSelector{}}}
			if j%2 == 0 {
				bu.Spec.Helm = &fleet.HelmOptions{Values: &fleet.GenericMap{Data: map[string]interface{}{"name": "${ .ClusterName }"}}}
			}
			must(b, env.Client.Create(ctx, bu))
		}
		eventually(b, 30*time.Minute, func() error {
			list := &metav1.PartialObjectMetadataList{}
			list.SetGroupVersionKind(fleet.GroupVersion.WithKind("BundleDeploymentList"))
			if err := env.Client.List(ctx, list, client.MatchingLabels{fleet.BundleNamespaceLabel: ws}); err != nil {
				return err
			}
			if len(list.Items) != clusters*bundles {
				return fmt.Errorf("%d deployments", len(list.Items))
			}
			for j := 0; j < bundles; j++ {
				bu := &fleet.Bundle{}
				if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ws, Name: fmt.Sprintf("b-%d", j)}, bu); err != nil {
					return err
				}
				if bu.Status.Summary.DesiredReady != clusters || bu.Status.Summary.Pending != 0 {
					return fmt.Errorf("bundle %s summary %+v", bu.Name, bu.Status.Summary.DesiredReady)
				}
			}
			return nil
		})
		elapsed := time.Since(start)
		b.ReportMetric(elapsed.Seconds(), "s/10k-deployments")
		b.ReportMetric(float64(clusters*bundles)/elapsed.Seconds(), "deployments/s")
	}
}
