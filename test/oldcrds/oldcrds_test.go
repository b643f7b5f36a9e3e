// Package oldcrds starts the manager against a manager cluster whose CRDs
// predate HelmOps and Policies (the manager chart upgraded before the
// fleet-crd chart): it must run everything else rather than fail to start,
// and enforce Policies as soon as their CRD is installed, without a restart.
package oldcrds

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/manager"
	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

var upstream *testenv.Cluster

func TestMain(m *testing.M) {
	var err error
	if upstream, err = testenv.Start(testenv.Options{Name: "oldcrds"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = upstream.Stop()
	os.Exit(code)
}

func TestManagerRunsWithOldCRDsAndEnforcesPoliciesOnceServed(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := upstream.Client

	// Take the HelmOp and Policy CRDs away and wait until discovery no
	// longer serves them: the GitRepo, HelmOp and Bundle controllers all
	// watch Policies when they exist.
	dc, err := discovery.NewDiscoveryClientForConfig(upstream.Config)
	if err != nil {
		t.Fatal(err)
	}
	removed := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for kind, plural := range map[string]string{"HelmOp": "helmops", "Policy": "policies"} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: plural + "." + fleet.GroupVersion.Group}, crd); err != nil {
			t.Fatal(err)
		}
		removed[kind] = crd.DeepCopy()
		if err := c.Delete(ctx, crd); err != nil {
			t.Fatal(err)
		}
		fleettest.Eventually(t, 60*time.Second, func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(crd), &apiextensionsv1.CustomResourceDefinition{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("crd still there: %v", err)
			}
			list, err := dc.ServerResourcesForGroupVersion(fleet.GroupVersion.String())
			if err != nil {
				return err
			}
			for _, r := range list.APIResources {
				if r.Kind == kind {
					return fmt.Errorf("%s still served", kind)
				}
			}
			return nil
		})
	}

	mgr, err := manager.New(ctx, upstream.Config, manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", WebhookAddr: "0",
		BootstrapNamespace: fleet.BootstrapNamespace,
	})
	if err != nil {
		t.Fatalf("manager.New: %v", err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()

	// The rest of the manager works: the bootstrap creates the local
	// Cluster and the targeting controller processes a Bundle.
	fleettest.Eventually(t, 90*time.Second, func() error {
		select {
		case err := <-stopped:
			t.Fatalf("the manager stopped: %v", err)
		default:
		}
		return c.Get(ctx, client.ObjectKey{Namespace: fleet.BootstrapNamespace, Name: fleet.LocalClusterName}, &fleet.Cluster{})
	})
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: fleet.BootstrapNamespace, Name: "cm"},
		Spec: fleet.BundleSpec{Resources: []fleet.BundleResource{{Name: "cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n"}}}}
	if err := c.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, 90*time.Second, func() error {
		got := &fleet.Bundle{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(b), got); err != nil {
			return err
		}
		if got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("bundle not processed: %+v", got.Status)
		}
		return nil
	})
	select {
	case err := <-stopped:
		t.Fatalf("the manager stopped: %v", err)
	default:
	}

	// The fleet-crd chart is upgraded while the manager runs: a Policy
	// created then is enforced without a restart, and re-evaluates the
	// Bundle processed before (no change to the Bundle itself).
	crd := removed["Policy"]
	crd.ObjectMeta = metav1.ObjectMeta{Name: crd.Name, Labels: crd.Labels, Annotations: crd.Annotations}
	crd.Status = apiextensionsv1.CustomResourceDefinitionStatus{}
	if err := c.Create(ctx, crd); err != nil {
		t.Fatal(err)
	}
	policy := &fleet.Policy{ObjectMeta: metav1.ObjectMeta{Namespace: fleet.BootstrapNamespace, Name: "tenant"}, RequireServiceAccount: true}
	fleettest.Eventually(t, 60*time.Second, func() error { return c.Create(ctx, policy) })
	fleettest.Eventually(t, 90*time.Second, func() error {
		got := &fleet.Bundle{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(b), got); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, fleet.ConditionStalled)
		if cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "Policy tenant requires one") {
			return fmt.Errorf("the Bundle is not refused by the new Policy: %+v", cond)
		}
		return nil
	})
	select {
	case err := <-stopped:
		t.Fatalf("the manager stopped: %v", err)
	default:
	}
}
