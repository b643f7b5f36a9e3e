package registration

import (
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// awaitedOnDelete says whether the clean-up of a deleted Cluster waits for
// reg (one of its registrations, see registrationOf) to be gone: reg is
// not being deleted yet, or its deletion still waits for the registration
// controller, which revokes its credential and then removes its
// finalizer. Once that finalizer is gone the manager is done with reg:
// what it was granted is revoked, and a registration being deleted is
// never granted, so it cannot create the Cluster again. Whatever else
// keeps it (a finalizer of someone else's, which anyone allowed to create
// registrations, a registration token too, may set) must not keep the
// Cluster from being deleted.
func awaitedOnDelete(reg *fleet.ClusterRegistration) bool {
	return reg.DeletionTimestamp.IsZero() || controllerutil.ContainsFinalizer(reg, registrationFinalizer)
}
