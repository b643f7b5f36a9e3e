package bundledeployment_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/bundledeployment"
)

// A BundleDeployment deleted while the copy of an entry its last deploy
// dropped is still left (its deletion denied, StaleCopiesNotDeleted)
// takes that copy with it, although the deploy it remembers lists no
// downstreamResources: the clean-up fails while the copy may not be
// deleted, keeps the release until it may, and then deletes both. Also
// when the agent restarted after the denied deletion (it knows the
// deletion is due from the status only).
func TestStaleCopyRemovedWithBundleDeployment(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			name := fmt.Sprintf("prunegone-%v", restart)
			ns, src := name+"-ns", name+"-conf"
			createObjects(t, up.Client, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: src, Namespace: clusterNS}, Data: map[string]string{"c": "1"},
			})
			grantPruneKeeper(t, ns, false)
			// The release holds a Secret, which pruneKeeper may delete: its
			// uninstall would succeed; only the ConfigMap copy is denied.
			secretFile := func(v string) map[string]string {
				return map[string]string{"s.yaml": "apiVersion: v1\nkind: Secret\nmetadata:\n  name: " + name + "\nstringData:\n  k: \"" + v + "\"\n"}
			}
			b := bundle{name: name, files: secretFile("v1"), opts: fleet.BundleDeploymentOptions{
				DefaultNamespace: ns, ServiceAccount: pruneKeeper,
				DownstreamResources: []fleet.DownstreamResource{{Kind: "ConfigMap", Name: src}},
			}}
			waitState(t, name, put(t, b), fleet.Ready)
			if _, err := configMap(t, ns, src); err != nil {
				t.Fatalf("copy %s: %v", src, err)
			}
			b.opts.DownstreamResources = nil
			b.files = secretFile("v2")
			waitState(t, name, put(t, b), fleet.Ready)
			wantStaleReported(t, name, src)
			if restart {
				forget(t, name)
				setPaused(t, name, false)
				eventually(t, "resumed "+name+" watched again", func() error {
					if bundledeployment.WatchedObjects(clusterNS, name) == 0 {
						return fmt.Errorf("not watched")
					}
					return nil
				})
				wantStaleReported(t, name, src)
			}

			deleteBD(t, name)
			// The clean-up started (it forgets the drift watch first): no
			// deploy can prune the copy any more.
			eventually(t, "clean-up of "+name+" started", func() error {
				if n := bundledeployment.WatchedObjects(clusterNS, name); n != 0 {
					return fmt.Errorf("%d objects still watched", n)
				}
				return nil
			})
			if _, err := configMap(t, ns, src); err != nil {
				t.Fatalf("copy %s while its deletion is denied: %v", src, err)
			}
			if len(releaseSecrets(t, ns, name)) == 0 {
				t.Fatalf("release %s/%s uninstalled although its copy %s could not be deleted yet", ns, name, src)
			}
			grantPruneKeeper(t, ns, true)
			eventually(t, "copy "+src+" deleted with its bundle deployment", func() error {
				if _, err := configMap(t, ns, src); !apierrors.IsNotFound(err) {
					return fmt.Errorf("still there (err %v)", err)
				}
				return nil
			})
			waitNoReleaseSecrets(t, ns, name)
		})
	}
}

// wantStaleReported waits until name's Deployed condition says the copy
// src is left and why.
func wantStaleReported(t *testing.T, name, src string) {
	t.Helper()
	eventually(t, "Deployed condition reports the copy "+src+" left", func() error {
		c := deployedCondition(t, name)
		if c.Status != metav1.ConditionTrue || c.Reason != bundledeployment.ReasonStaleCopies ||
			!strings.Contains(c.Message, src) || !strings.Contains(c.Message, "forbidden") {
			return fmt.Errorf("Deployed condition %+v", c)
		}
		return nil
	})
}
