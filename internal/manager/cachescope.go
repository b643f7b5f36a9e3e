package manager

import (
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// lateShardedKinds are the kinds the cache filters by shard (shardCache)
// that the API server may serve only after the manager started (fleet-crd
// upgraded later). All are namespaced.
var lateShardedKinds = map[string]string{"HelmOp": "helmops"}

// buildScopes answers, while the cache is built, the one question
// controller-runtime asks then of each kind with options of its own:
// whether it is namespaced. For a kind of lateShardedKinds the API server
// does not serve yet, the real mapper has no answer and the cache (so the
// manager) would fail to build; without the options, the informer created
// when the kind appears would hold and reconcile every shard's objects.
// Once built (Built), every question goes to the real mapper, so a read of
// a kind still missing fails at once as before, and the informer of a kind
// that appeared is mapped from discovery.
type buildScopes struct {
	meta.RESTMapper
	built atomic.Bool
}

// Built ends the fallback.
func (m *buildScopes) Built() { m.built.Store(true) }

func (m *buildScopes) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	mapping, err := m.RESTMapper.RESTMapping(gk, versions...)
	if err == nil || m.built.Load() || !meta.IsNoMatchError(err) || gk.Group != fleet.GroupVersion.Group {
		return mapping, err
	}
	plural, ok := lateShardedKinds[gk.Kind]
	if !ok {
		return mapping, err
	}
	return &meta.RESTMapping{
		Resource:         fleet.GroupVersion.WithResource(plural),
		GroupVersionKind: fleet.GroupVersion.WithKind(gk.Kind),
		Scope:            meta.RESTScopeNamespace,
	}, nil
}
