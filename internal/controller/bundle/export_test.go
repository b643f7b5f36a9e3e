package bundle

import (
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// valuesSecretReads counts the API reads of each values Secret.
var valuesSecretReads sync.Map // client.ObjectKey → *atomic.Int64

func init() {
	onValuesSecretRead = func(key client.ObjectKey) {
		n, _ := valuesSecretReads.LoadOrStore(key, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
}

// ValuesSecretReads is how often the manager has read the values Secret
// key from the API server (rather than from what it already knew).
func ValuesSecretReads(key client.ObjectKey) int64 {
	n, ok := valuesSecretReads.Load(key)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

// reconciles counts the reconciles of each Bundle.
var reconciles sync.Map // types.NamespacedName → *atomic.Int64

func init() {
	onReconcile = func(key types.NamespacedName) {
		n, _ := reconciles.LoadOrStore(key, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
}

// Reconciles is how often the Bundle key has been reconciled.
func Reconciles(key types.NamespacedName) int64 {
	n, ok := reconciles.Load(key)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}
