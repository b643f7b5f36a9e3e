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

// guardSecret is the refused Secret of a case (payload "do-not-ship", in
// the keys a basic-auth Secret needs).
func guardSecret(ns, name string, typ corev1.SecretType, lbls map[string]string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls},
		Type:       typ,
		Data:       map[string][]byte{corev1.BasicAuthUsernameKey: []byte("do-not-ship"), corev1.BasicAuthPasswordKey: []byte("do-not-ship")},
	}
}

// TestDownstreamResourcesRefuseCredentials: a Secret named in
// downstreamResources that is a service-account token, one of Fleet's own
// (by type, label or owner), or a credential of a GitRepo, HelmOp, Cluster,
// GitRepoRestriction or Policy of the namespace is not copied to the
// cluster namespace; the Bundle's Ready condition names it and says why,
// without its content. An ordinary Secret of the same Bundle is still
// copied.
func TestDownstreamResourcesRefuseCredentials(t *testing.T) {
	ctx := context.Background()
	ws := "ws-dguard"
	createNamespace(t, ctx, ws, nil)
	c := newCluster(t, ctx, ws, "dg1", map[string]string{"dguard": "yes"}, time.Second)
	cns := c.Status.Namespace

	// The object that owns the owned case: any Fleet object will do.
	owner := &fleet.GitRepoRestriction{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "owner-of-secret"}}
	must(t, env.Client.Create(ctx, owner))

	cases := []struct {
		name   string
		secret *corev1.Secret
		// setup creates what makes the Secret a credential.
		setup func(t *testing.T, name string)
		why   string
	}{
		{
			name:   "fleet-type",
			secret: guardSecret(ws, "fleet-type", fleet.SecretTypeClusterRegistrationValues, nil),
			why:    "type " + fleet.SecretTypeClusterRegistrationValues + " is internal to Fleet",
		},
		{
			name:   "fleet-label",
			secret: guardSecret(ws, "fleet-label", corev1.SecretTypeOpaque, map[string]string{fleet.ManagedLabel: "true"}),
			why:    "Fleet's label " + fleet.ManagedLabel,
		},
		{
			name: "fleet-owned",
			secret: func() *corev1.Secret {
				s := guardSecret(ws, "fleet-owned", corev1.SecretTypeOpaque, nil)
				s.OwnerReferences = []metav1.OwnerReference{{APIVersion: fleet.GroupVersion.String(), Kind: "GitRepoRestriction", Name: owner.Name, UID: owner.UID}}
				return s
			}(),
			why: "owned by Fleet's GitRepoRestriction owner-of-secret",
		},
		{
			name:   "git-client",
			secret: guardSecret(ws, "git-client", corev1.SecretTypeBasicAuth, nil),
			setup: func(t *testing.T, name string) {
				must(t, env.Client.Create(ctx, &fleet.GitRepo{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "repo-client"},
					Spec: fleet.GitRepoSpec{Repo: "https://git.example.com/a", ClientSecretName: name}}))
			},
			why: "GitRepo repo-client names it as clientSecretName",
		},
		{
			name:   "git-helm",
			secret: guardSecret(ws, "git-helm", corev1.SecretTypeOpaque, nil),
			setup: func(t *testing.T, name string) {
				must(t, env.Client.Create(ctx, &fleet.GitRepo{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "repo-helm"},
					Spec: fleet.GitRepoSpec{Repo: "https://git.example.com/b", ClientSecretName: "unrelated", HelmSecretName: name}}))
			},
			why: "GitRepo repo-helm names it as helmSecretName",
		},
		{
			name:   "git-helm-paths",
			secret: guardSecret(ws, "git-helm-paths", corev1.SecretTypeOpaque, nil),
			setup: func(t *testing.T, name string) {
				must(t, env.Client.Create(ctx, &fleet.GitRepo{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "repo-paths"},
					Spec: fleet.GitRepoSpec{Repo: "https://git.example.com/c", ClientSecretName: "unrelated", HelmSecretNameForPaths: name}}))
			},
			why: "GitRepo repo-paths names it as helmSecretNameForPaths",
		},
		{
			name:   "git-webhook",
			secret: guardSecret(ws, "git-webhook", corev1.SecretTypeOpaque, nil),
			setup: func(t *testing.T, name string) {
				must(t, env.Client.Create(ctx, &fleet.GitRepo{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "repo-webhook"},
					Spec: fleet.GitRepoSpec{Repo: "https://git.example.com/w", ClientSecretName: "unrelated", WebhookSecret: name}}))
			},
			why: "GitRepo repo-webhook names it as webhookSecret",
		},
		{
			// A GitRepo naming no client Secret uses gitcredential.
			name:   "gitcredential",
			secret: guardSecret(ws, "gitcredential", corev1.SecretTypeBasicAuth, nil),
			setup: func(t *testing.T, name string) {
				must(t, env.Client.Create(ctx, &fleet.GitRepo{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "repo-default"},
					Spec: fleet.GitRepoSpec{Repo: "https://git.example.com/d"}}))
			},
			why: "GitRepo repo-default uses it as its default client Secret",
		},
		{
			name:   "helmop",
			secret: guardSecret(ws, "helmop", corev1.SecretTypeBasicAuth, nil),
			setup: func(t *testing.T, name string) {
				must(t, env.Client.Create(ctx, &fleet.HelmOp{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "op"},
					Spec: fleet.HelmOpSpec{BundleSpec: fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{
						Helm: &fleet.HelmOptions{Repo: "https://charts.example.com", Chart: "app"},
					}}, HelmSecretName: name}}))
			},
			why: "HelmOp op names it as helmSecretName",
		},
		{
			// An imported cluster of another workspace whose kubeconfig
			// Secret lives in this one.
			name:   "kubeconfig",
			secret: guardSecret(ws, "kubeconfig", corev1.SecretTypeOpaque, nil),
			setup: func(t *testing.T, name string) {
				other := "ws-dguard-other"
				createNamespace(t, ctx, other, nil)
				must(t, env.Client.Create(ctx, &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "imported"},
					Spec: fleet.ClusterSpec{KubeConfigSecret: name, KubeConfigSecretNamespace: ws}}))
			},
			why: "Cluster ws-dguard-other/imported names it as kubeConfigSecret",
		},
		{
			name:   "restriction",
			secret: guardSecret(ws, "restriction", corev1.SecretTypeBasicAuth, nil),
			setup: func(t *testing.T, name string) {
				must(t, env.Client.Create(ctx, &fleet.GitRepoRestriction{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "restrict"},
					AllowedClientSecretNames: []string{name}}))
			},
			why: "GitRepoRestriction restrict names it as a client Secret",
		},
		{
			name:   "policy",
			secret: guardSecret(ws, "policy", corev1.SecretTypeBasicAuth, nil),
			setup: func(t *testing.T, name string) {
				must(t, env.Client.Create(ctx, &fleet.Policy{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "pol"},
					HelmOp: &fleet.HelmOpPolicy{DefaultHelmSecretName: name}}))
			},
			why: "Policy pol names it as a HelmOp Helm Secret",
		},
		{
			// Last: before this change its copy failed (the API server
			// wants the service-account annotation), stopping the rest.
			name: "sa-token",
			secret: func() *corev1.Secret {
				s := guardSecret(ws, "sa-token", corev1.SecretTypeServiceAccountToken, nil)
				s.Annotations = map[string]string{corev1.ServiceAccountNameKey: "default"}
				return s
			}(),
			why: "service-account token",
		},
	}
	refs := []fleet.DownstreamResource{{Kind: "Secret", Name: "plain"}}
	must(t, env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "plain"},
		Data:       map[string][]byte{"password": []byte("fine")},
	}))
	for _, tc := range cases {
		must(t, env.Client.Create(ctx, tc.secret))
		if tc.setup != nil {
			tc.setup(t, tc.secret.Name)
		}
		refs = append(refs, fleet.DownstreamResource{Kind: "Secret", Name: tc.secret.Name})
	}
	b := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "dguard"},
		Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{DownstreamResources: refs},
			Resources:               resources("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"),
			Targets:                 []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"dguard": "yes"}}}},
		},
	}
	must(t, env.Client.Create(ctx, b))

	// The ordinary Secret is copied.
	eventually(t, 60*time.Second, func() error {
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: cns, Name: "plain"}, s); err != nil {
			return fmt.Errorf("ordinary Secret not copied: %w", err)
		}
		if string(s.Data["password"]) != "fine" {
			return fmt.Errorf("ordinary copy %v", s.Data)
		}
		return nil
	})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := "secret " + ws + "/" + tc.secret.Name + " may not be copied to clusters: "
			eventually(t, 20*time.Second, func() error {
				cur := &fleet.Bundle{}
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(b), cur); err != nil {
					return err
				}
				cond := meta.FindStatusCondition(cur.Status.Conditions, fleet.ConditionReady)
				if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != bundle.ReasonDownstreamSource {
					return fmt.Errorf("ready condition %+v", cond)
				}
				if strings.Contains(cond.Message, "do-not-ship") {
					t.Fatalf("condition quotes a Secret's content: %s", cond.Message)
				}
				if i := strings.Index(cond.Message, want); i < 0 || !strings.Contains(cond.Message[i:], tc.why) {
					return fmt.Errorf("condition does not refuse %s because %q: %s", tc.secret.Name, tc.why, cond.Message)
				}
				err := env.Client.Get(ctx, client.ObjectKey{Namespace: cns, Name: tc.secret.Name}, &corev1.Secret{})
				if !apierrors.IsNotFound(err) {
					return fmt.Errorf("secret %s copied to %s (%v)", tc.secret.Name, cns, err)
				}
				return nil
			})
		})
	}
	// The deployment is still written, as for a missing source.
	bds, err := bundleDeployments(ctx, ws, "dguard")
	must(t, err)
	if bds["dg1"] == nil {
		t.Fatal("no deployment for dg1")
	}
}

// TestDownstreamResourcesCopyRemovedOnceCredential: a Secret copied while
// ordinary stops being copied once a GitRepo names it as a credential (at
// the Bundle's next reconcile), and its copy leaves the cluster namespace,
// while a copy of an ordinary Secret of the same Bundle stays.
func TestDownstreamResourcesCopyRemovedOnceCredential(t *testing.T) {
	ctx := context.Background()
	ws := "ws-dguard-later"
	createNamespace(t, ctx, ws, nil)
	c := newCluster(t, ctx, ws, "dgl1", map[string]string{"dguardlater": "yes"}, time.Second)
	cns := c.Status.Namespace
	for _, name := range []string{"shared-creds", "plain"} {
		must(t, env.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name},
			Data:       map[string][]byte{"password": []byte("p")},
		}))
	}
	b := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "dguard-later"},
		Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{DownstreamResources: []fleet.DownstreamResource{
				{Kind: "Secret", Name: "shared-creds"}, {Kind: "Secret", Name: "plain"},
			}},
			Resources: resources("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"),
			Targets:   []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"dguardlater": "yes"}}}},
		},
	}
	must(t, env.Client.Create(ctx, b))
	eventually(t, 60*time.Second, func() error {
		for _, name := range []string{"shared-creds", "plain"} {
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: cns, Name: name}, &corev1.Secret{}); err != nil {
				return err
			}
		}
		return nil
	})

	must(t, env.Client.Create(ctx, &fleet.GitRepo{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "repo"},
		Spec: fleet.GitRepoSpec{Repo: "https://git.example.com/x", ClientSecretName: "shared-creds"}}))
	// The next reconcile of the Bundle (here from a label change).
	update(t, ctx, b, false, func() { b.Labels = map[string]string{"touched": "yes"} })
	eventually(t, 60*time.Second, func() error {
		cur := &fleet.Bundle{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(b), cur); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(cur.Status.Conditions, fleet.ConditionReady)
		if cond == nil || cond.Reason != bundle.ReasonDownstreamSource ||
			!strings.Contains(cond.Message, "secret "+ws+"/shared-creds may not be copied to clusters: GitRepo repo names it as clientSecretName") {
			return fmt.Errorf("ready condition %+v", cond)
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: cns, Name: "shared-creds"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("copy of the credential still in %s (%v)", cns, err)
		}
		return nil
	})
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: cns, Name: "plain"}, &corev1.Secret{}))
}
