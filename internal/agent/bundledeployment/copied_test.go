package bundledeployment_test

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
)

// copyAs writes, as the tenant, a copy of the agent's signed storage
// Secret src (signature label included) under a new name, with labels
// changed by relabel.
func copyAs(t *testing.T, as interface {
	Create(context.Context, *corev1.Secret, metav1.CreateOptions) (*corev1.Secret, error)
}, src *corev1.Secret, name string, relabel map[string]string) {
	t.Helper()
	cp := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: src.Namespace, Labels: map[string]string{}},
		Type: src.Type, Data: src.Data}
	for k, v := range src.Labels {
		cp.Labels[k] = v
	}
	for k, v := range relabel {
		cp.Labels[k] = v
	}
	_, err := as.Create(context.Background(), cp, metav1.CreateOptions{})
	must(t, err)
}

// A tenant who may read and create Secrets in a release namespace copies
// the agent's signed revision of release foo, signature and all, into a
// Secret labelled as release bar, and into one labelled as revision 9999
// of foo. The signature covers the revision's payload, not the labels
// nor the Secret's name: neither copy is the agent's. Garbage collection
// must not take bar for a release of foo's BundleDeployment that it no
// longer claims (uninstalling it would delete foo's objects), and must
// log both copies as storage the agent did not write.
func TestCopiedSignedRevisionNotTrusted(t *testing.T) {
	ctx := context.Background()
	const ns = "copied-sig-tenant"
	as := tenant(t, ns)
	b := bundle{
		name:  "copied-sig",
		files: map[string]string{"cm.yaml": cmFile("copied-sig-cm", "v1")},
		opts:  fleet.BundleDeploymentOptions{DefaultNamespace: ns},
	}
	waitState(t, b.name, put(t, b), fleet.Ready)
	cm, err := configMap(t, ns, "copied-sig-cm")
	must(t, err)
	revs := releaseSecrets(t, ns, b.name)
	if len(revs) != 1 {
		t.Fatalf("%d revisions of %s stored, want 1", len(revs), b.name)
	}
	src := &revs[0]
	const renamed = "copied-sig-bar"
	copyAs(t, as.CoreV1().Secrets(ns), src, "sh.helm.release.v1."+renamed+".v1", map[string]string{"name": renamed})
	copyAs(t, as.CoreV1().Secrets(ns), src, "sh.helm.release.v1."+b.name+".v9999", map[string]string{"version": "9999"})

	var log captured
	lctx := logr.NewContext(ctx, log.logger())
	for range 2 {
		must(t, bundledeployment.Collect(lctx))
	}
	survives(t, "garbage collection", map[string]types.UID{cm.Name: cm.UID}, func(n string) (metav1.Object, error) {
		return configMap(t, ns, n)
	})
	if n := len(releaseSecrets(t, ns, b.name)); n < 1 {
		t.Fatalf("the real release %s lost its storage", b.name)
	}
	for _, name := range []string{"sh.helm.release.v1." + renamed + ".v1", "sh.helm.release.v1." + b.name + ".v9999"} {
		if l := log.mentioning("did not write", name); len(l) == 0 {
			t.Errorf("garbage collection did not log the copy %s as untrusted; log:\n%s", name, strings.Join(log.lines, "\n"))
		}
	}

	// The real release is still the agent's, and its own only is removed.
	deleteBD(t, b.name)
	waitNoReleaseSecrets(t, ns, b.name)
	wantGone(t, ns, "copied-sig-cm")
	must(t, down.Clientset.CoreV1().Secrets(ns).Delete(ctx, "sh.helm.release.v1."+renamed+".v1", metav1.DeleteOptions{}))
}
