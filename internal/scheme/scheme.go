// Package scheme is the runtime.Scheme shared by the manager, the agent and the
// CLI: core Kubernetes kinds, CRDs and the Fleet kinds.
package scheme

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// Scheme knows every kind the project reads or writes.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(Scheme))
	utilruntime.Must(fleet.AddToScheme(Scheme))
}
