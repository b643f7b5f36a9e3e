package bundle

import "sigs.k8s.io/controller-runtime/pkg/client"

// NewReconcilerForTest is a Reconciler with default options that reads
// Bundles through c, the API server through apiReader and deployments
// from objs: a test hands it a c whose Bundle reads lag behind the API
// server, as the manager's cache can.
func NewReconcilerForTest(c client.Client, apiReader client.Reader, objs *CachedObjects) *Reconciler {
	opts := Options{}
	opts.defaults()
	return &Reconciler{Client: c, APIReader: apiReader, Opts: opts, objs: objs, largePasses: make(chan struct{}, maxLargePasses)}
}
