package registration_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/registration"
)

// TestImportRefusesManagerCredentials: a workspace user controls the
// kubeconfig Secret of an import, so it must not be able to make the
// manager use the manager's own credentials: neither a kubeconfig that
// names a local file (here the token file a pod's ServiceAccount token
// lives in) or a plugin, which would send them to a server of the user's
// choosing, nor the management cluster's own kubeconfig in fleet-local.
func TestImportRefusesManagerCredentials(t *testing.T) {
	ctx := context.Background()
	var requests atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.Error(w, "no", http.StatusForbidden)
	}))
	defer srv.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("the-managers-own-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	kubeconfig := func(user string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: u, user: %s}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, srv.URL, user)
	}
	for name, user := range map[string]string{
		"tokenfile": fmt.Sprintf("{tokenFile: %q}", tokenFile),
		"exec":      "{exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/true, interactiveMode: Never}}",
	} {
		if err := up.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-kc", Namespace: workspace},
			Data: map[string][]byte{"value": []byte(kubeconfig(user))}}); err != nil {
			t.Fatal(err)
		}
		if err := up.Client.Create(ctx, &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: workspace},
			Spec: fleet.ClusterSpec{KubeConfigSecret: name + "-kc"}}); err != nil {
			t.Fatal(err)
		}
	}
	// The management cluster's own kubeconfig, from another workspace.
	if err := up.Client.Create(ctx, &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "steal-local", Namespace: workspace},
		Spec: fleet.ClusterSpec{KubeConfigSecret: "local-cluster", KubeConfigSecretNamespace: fleet.BootstrapNamespace}}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]struct{ reason, message string }{
		"tokenfile":   {registration.ReasonBadKubeconfig, `user "u" tokenFile`},
		"exec":        {registration.ReasonBadKubeconfig, `user "u" exec`},
		"steal-local": {registration.ReasonSecretNotAllowed, "fleet-local"},
	} {
		eventually(t, name+" refused", func() error {
			c := &fleet.Cluster{}
			if err := up.Client.Get(ctx, client.ObjectKey{Namespace: workspace, Name: name}, c); err != nil {
				return err
			}
			cond := meta.FindStatusCondition(c.Status.Conditions, fleet.ConditionImported)
			if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != want.reason || !strings.Contains(cond.Message, want.message) {
				return fmt.Errorf("conditions %+v", c.Status.Conditions)
			}
			if strings.Contains(cond.Message, tokenFile) {
				t.Errorf("%s: the condition quotes the kubeconfig's file path: %q", name, cond.Message)
			}
			return nil
		})
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("the manager sent %d requests to the server of a refused kubeconfig", n)
	}
	// The local cluster itself still imports from fleet-local.
	eventually(t, "local cluster imported", func() error {
		c := &fleet.Cluster{}
		if err := up.Client.Get(ctx, client.ObjectKey{Namespace: fleet.BootstrapNamespace, Name: fleet.LocalClusterName}, c); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(c.Status.Conditions, fleet.ConditionImported) {
			return fmt.Errorf("conditions %+v", c.Status.Conditions)
		}
		return nil
	})
}
