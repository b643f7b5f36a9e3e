package fleettest

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/testenv"
)

// SystemNamespaces are the namespaces `helm install fleet` creates in the
// manager cluster before the controller starts.
var SystemNamespaces = []string{fleet.DefaultSystemNamespace, fleet.DefaultSystemRegistrationNamespace}

// SystemOptions configure StartSystem.
type SystemOptions struct {
	// Prefix names the clusters <prefix>-upstream and <prefix>-downstream.
	Prefix string
	// Upstream are further options of the manager cluster, such as
	// ExtraAPIServerArgs; its Name and WithoutCRDs are set by StartSystem.
	Upstream testenv.Options
}

// StartSystem boots what an end-to-end test of the manager needs: a manager
// cluster with the Fleet CRDs and the system namespaces, and a separate
// downstream cluster without them. On error nothing is left running.
func StartSystem(opts SystemOptions) (up, down *testenv.Cluster, err error) {
	uo := opts.Upstream
	uo.Name, uo.WithoutCRDs = opts.Prefix+"-upstream", false
	if up, err = testenv.Start(uo); err != nil {
		return nil, nil, err
	}
	if down, err = testenv.Start(testenv.Options{Name: opts.Prefix + "-downstream", WithoutCRDs: true}); err != nil {
		_ = up.Stop()
		return nil, nil, err
	}
	if err = CreateSystemNamespaces(context.Background(), up.Client); err != nil {
		_ = down.Stop()
		_ = up.Stop()
		return nil, nil, err
	}
	return up, down, nil
}

// CreateSystemNamespaces creates SystemNamespaces (existing ones are fine).
func CreateSystemNamespaces(ctx context.Context, c client.Client) error {
	for _, ns := range SystemNamespaces {
		err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	return nil
}
