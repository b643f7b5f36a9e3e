package manager

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/testenv"
)

// up is the manager cluster (Fleet CRDs, an aggregation layer, the system
// namespaces the chart creates) for the tests that start a whole manager.
var up *testenv.Cluster

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	var err error
	if up, err = testenv.Start(testenv.Options{Name: "manager"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, ns := range []string{fleet.DefaultSystemNamespace, fleet.DefaultSystemRegistrationNamespace} {
		err := up.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			fmt.Fprintln(os.Stderr, err)
			_ = up.Stop()
			os.Exit(1)
		}
	}
	code := m.Run()
	_ = up.Stop()
	os.Exit(code)
}
