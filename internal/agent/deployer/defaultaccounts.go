package deployer

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// DefaultAccounts knows, from a watch, whether the DefaultServiceAccount
// exists in the agent namespace of a cluster. Without it every deploy
// looked the account up (a GET, remembered for LookupMaxAge); with it a
// deploy asks nobody, and an account created or deleted takes effect as
// soon as the watch delivers the event instead of up to LookupMaxAge
// later. Until the watch has listed once, deploys look up as before.
type DefaultAccounts struct {
	informer cache.SharedIndexInformer
}

// NewDefaultAccounts watches the DefaultServiceAccount of namespace, or of
// every namespace when it is empty (simulated agents of one cluster share
// one watch, as they share its discovery). Start runs it.
func NewDefaultAccounts(cs kubernetes.Interface, namespace string) *DefaultAccounts {
	lw := cache.NewFilteredListWatchFromClient(cs.CoreV1().RESTClient(), "serviceaccounts", namespace,
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", DefaultServiceAccount).String()
		})
	inf := cache.NewSharedIndexInformer(lw, &corev1.ServiceAccount{}, 0, cache.Indexers{})
	// Only whether it exists matters: keep the name and namespace.
	_ = inf.SetTransform(func(obj any) (any, error) {
		if sa, ok := obj.(*corev1.ServiceAccount); ok {
			return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
				Name: sa.Name, Namespace: sa.Namespace, ResourceVersion: sa.ResourceVersion,
			}}, nil
		}
		return obj, nil
	})
	return &DefaultAccounts{informer: inf}
}

// Start runs the watch until ctx ends.
func (a *DefaultAccounts) Start(ctx context.Context) {
	go a.informer.RunWithContext(ctx)
}

// exists reports whether the account exists in namespace ns, and whether
// the watch knows it (it has listed at least once). After the watch
// breaks, the last state it saw stands until it lists again.
func (a *DefaultAccounts) exists(ns string) (exists, known bool) {
	if a == nil || !a.informer.HasSynced() {
		return false, false
	}
	_, ok, err := a.informer.GetStore().GetByKey(ns + "/" + DefaultServiceAccount)
	if err != nil {
		return false, false
	}
	return ok, true
}

// WaitForSync waits until the watch has listed once, or ctx ends, and
// reports whether it has.
func (a *DefaultAccounts) WaitForSync(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), a.informer.HasSynced)
}
