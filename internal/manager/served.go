package manager

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/policy"
)

// servedKinds asks the API server, once, which kinds of fleet.cattle.io it
// serves. A manager upgraded before its fleet-crd chart then runs without
// the kinds the old CRDs lack (HelmOp, Policy) instead of failing to start
// on a watch or cache of an unknown kind.
func servedKinds(cfg *rest.Config) (*metav1.APIResourceList, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	list, err := dc.ServerResourcesForGroupVersion(fleet.GroupVersion.String())
	switch {
	case apierrors.IsNotFound(err):
		return &metav1.APIResourceList{}, nil
	case err != nil:
		return nil, fmt.Errorf("discovering %s: %w", fleet.GroupVersion, err)
	}
	return list, nil
}

// servesKind reports whether a discovery list has kind.
func servesKind(list *metav1.APIResourceList, kind string) bool {
	for _, r := range list.APIResources {
		if r.Kind == kind {
			return true
		}
	}
	return false
}

// servedRecheck is how often a manager started without some of its CRDs
// asks discovery again: one small request, only until they appear.
const servedRecheck = 10 * time.Second

// servedKindsPoller watches for the kinds a manager started without. The
// Policy CRD opens the Policy gate (enforced from then on, without a
// restart: a fail-open window must not last until someone restarts the
// manager); the HelmOp CRD is only logged, since the HelmOp controller
// needs a restart to start.
type servedKindsPoller struct {
	cfg            *rest.Config
	policies       *policy.Gate
	helmOpsMissing bool
}

// NeedLeaderElection is false: every replica enforces Policies as soon as
// it may act.
func (p *servedKindsPoller) NeedLeaderElection() bool { return false }

func (p *servedKindsPoller) Start(ctx context.Context) error {
	policyMissing, helmOpMissing := !p.policies.Served(), p.helmOpsMissing
	if !policyMissing && !helmOpMissing {
		return nil
	}
	log := ctrl.Log.WithName("served-kinds")
	_ = wait.PollUntilContextCancel(ctx, servedRecheck, false, func(context.Context) (bool, error) {
		list, err := servedKinds(p.cfg)
		if err != nil {
			log.Error(err, "checking which fleet kinds the API server serves")
			return false, nil
		}
		if policyMissing && servesKind(list, "Policy") {
			policyMissing = false
			if err := p.policies.Open(); err != nil {
				// Reads enforce Policies all the same; a watch that did
				// not start only delays re-evaluation to each object's
				// next change.
				log.Error(err, "starting the Policy watches")
			}
			log.Info("the Policy CRD is now served: Policies are enforced")
		}
		if helmOpMissing && servesKind(list, "HelmOp") {
			helmOpMissing = false
			log.Info("the HelmOp CRD is now served: restart the manager to run the HelmOp controller")
		}
		return !policyMissing && !helmOpMissing, nil
	})
	return nil
}
