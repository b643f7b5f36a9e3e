package bundle_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/bundle"
)

// downstreamResources: the Secret/ConfigMap named in the options is copied
// from the Bundle's namespace into the cluster namespace (where the agent
// reads it), labelled as a Fleet copy and owned by the BundleDeployment; a
// change of the source updates the copy and bumps
// spec.downstreamResourcesGeneration; a missing source is a Ready=False
// condition naming it, and nothing is deleted; deleting the bundle removes
// the copies.
func TestDownstreamResourcesCopiedToClusterNamespace(t *testing.T) {
	ctx := context.Background()
	ws := "ws-downstream"
	createNamespace(t, ctx, ws, nil)
	c := newCluster(t, ctx, ws, "dr1", map[string]string{"dr": "yes"}, time.Second)
	cns := c.Status.Namespace
	must(t, env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "db-creds"},
		Data:       map[string][]byte{"password": []byte("one")},
	}))
	must(t, env.Client.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "settings"},
		Data:       map[string]string{"mode": "a"},
	}))
	b := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "dr"},
		Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{DownstreamResources: []fleet.DownstreamResource{
				{Kind: "Secret", Name: "db-creds"}, {Kind: "ConfigMap", Name: "settings"},
			}},
			Resources: resources("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"),
			Targets:   []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"dr": "yes"}}}},
		},
	}
	must(t, env.Client.Create(ctx, b))

	var bd *fleet.BundleDeployment
	eventually(t, 60*time.Second, func() error {
		bds, err := bundleDeployments(ctx, ws, "dr")
		if err != nil || bds["dr1"] == nil {
			return fmt.Errorf("no deployment yet (%v)", err)
		}
		bd = bds["dr1"]
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: cns, Name: "db-creds"}, s); err != nil {
			return err
		}
		if string(s.Data["password"]) != "one" || s.Labels[fleet.BundleInternalSecretLbl] != "true" {
			return fmt.Errorf("secret copy %v %v", s.Labels, s.Data)
		}
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != bd.UID {
			return fmt.Errorf("secret copy owners %+v", s.OwnerReferences)
		}
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: cns, Name: "settings"}, cm); err != nil {
			return err
		}
		if cm.Data["mode"] != "a" || cm.Labels[fleet.BundleInternalSecretLbl] != "true" {
			return fmt.Errorf("configmap copy %v %v", cm.Labels, cm.Data)
		}
		return nil
	})
	gen := bd.Spec.DownstreamResourcesGeneration
	deploymentID := bd.Spec.DeploymentID

	// The source changes: the copy follows (from the Secret watch, without
	// touching the Bundle) and the generation moves so the agent redeploys.
	src := &corev1.Secret{}
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ws, Name: "db-creds"}, src))
	src.Data["password"] = []byte("two")
	must(t, env.Client.Update(ctx, src))
	eventually(t, 60*time.Second, func() error {
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: cns, Name: "db-creds"}, s); err != nil {
			return err
		}
		if string(s.Data["password"]) != "two" {
			return fmt.Errorf("copy still %q", s.Data["password"])
		}
		cur := &fleet.BundleDeployment{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(bd), cur); err != nil {
			return err
		}
		if cur.Spec.DownstreamResourcesGeneration <= gen {
			return fmt.Errorf("downstreamResourcesGeneration %d, was %d", cur.Spec.DownstreamResourcesGeneration, gen)
		}
		if cur.Spec.DeploymentID != deploymentID {
			return fmt.Errorf("deploymentID changed: %s", cur.Spec.DeploymentID)
		}
		return nil
	})

	// A missing source: a clear condition for that cluster, the existing
	// copies and the deployment stay.
	update(t, ctx, b, false, func() {
		b.Spec.DownstreamResources = append(b.Spec.DownstreamResources, fleet.DownstreamResource{Kind: "Secret", Name: "not-there"})
	})
	eventually(t, 60*time.Second, func() error {
		cur := &fleet.Bundle{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(b), cur); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(cur.Status.Conditions, fleet.ConditionReady)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != bundle.ReasonDownstreamSource ||
			!strings.Contains(cond.Message, "dr1") || !strings.Contains(cond.Message, ws+"/not-there not found") {
			return fmt.Errorf("ready condition %+v", cond)
		}
		return nil
	})
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: cns, Name: "db-creds"}, &corev1.Secret{}))
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(bd), &fleet.BundleDeployment{}))

	// Creating it (a watched event) clears the condition.
	must(t, env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "not-there"},
		Data:       map[string][]byte{"k": []byte("v")},
	}))
	eventually(t, 60*time.Second, func() error {
		cur := &fleet.Bundle{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(b), cur); err != nil {
			return err
		}
		if cond := meta.FindStatusCondition(cur.Status.Conditions, fleet.ConditionReady); cond == nil || cond.Reason == bundle.ReasonDownstreamSource {
			return fmt.Errorf("ready condition %+v", cond)
		}
		return env.Client.Get(ctx, client.ObjectKey{Namespace: cns, Name: "not-there"}, &corev1.Secret{})
	})

	// Deleting the bundle removes its deployment and the copies (no
	// garbage collector runs in envtest: the controller does it).
	must(t, env.Client.Delete(ctx, b))
	eventually(t, 60*time.Second, func() error {
		for _, o := range []client.Object{
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cns, Name: "db-creds"}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cns, Name: "not-there"}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cns, Name: "settings"}},
		} {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T %s still there (%v)", o, o.GetName(), err)
			}
		}
		return nil
	})
	// The sources in the Bundle's namespace are the user's: untouched.
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ws, Name: "db-creds"}, &corev1.Secret{}))
}
