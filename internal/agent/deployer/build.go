package deployer

import (
	"bytes"
	"crypto/sha256"
	"io"
	"sync"

	"helm.sh/helm/v4/pkg/kube"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/resource"
)

// builds is what an actionClient keeps to parse each manifest of an
// action once.
//
// Helm parses an upgrade's manifests three times: the new one to validate
// it (and drops the result), the old one to know which objects it held, and
// the new one again to apply it. Parsing (YAML to JSON to objects, and
// mapping each kind) was the largest part of an upgrade's CPU in the agent.
// So the second parse of the new manifest gets the first one's result, and
// the old manifest, when this process deployed it, is not parsed at all:
// an upgrade that applies without reading (fastApply) needs of the old
// objects only their kinds and names — to delete those that left the
// release, which Helm does after reading each from the API server — and the
// Deployer remembered them (deployedObjects) when it deployed that manifest.
type builds struct {
	// parse is Helm's Build; a field so that tests can count parses.
	parse  func(io.Reader, bool) (kube.ResourceList, error)
	mapper meta.RESTMapper
	// deployed are the objects of the manifest the release's last
	// successful deployment in this process applied; nil when unknown.
	deployed *releaseObjects

	mu    sync.Mutex
	built map[[sha256.Size]byte]*builtList
}

type builtList struct {
	list kube.ResourceList
	// reused is set once the list was handed out a second time.
	reused bool
}

// objectID is what identifies an object of a release.
type objectID struct {
	gvk             schema.GroupVersionKind
	namespace, name string
}

// releaseObjects are the objects of one manifest, by its digest.
type releaseObjects struct {
	sum [sha256.Size]byte
	ids []objectID
}

// Build is Helm's Build, parsing each manifest once per action (see
// builds).
func (c *actionClient) Build(r io.Reader, validate bool) (kube.ResourceList, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.built[sum]; b != nil && !b.reused && !c.updated.Load() {
		// Helm's validation dropped the first result: hand it out once,
		// before anything was applied (a rollback afterwards parses anew).
		b.reused = true
		return b.list, nil
	}
	if list, ok := c.fromDeployed(sum); ok {
		return list, nil
	}
	list, err := c.parse(bytes.NewReader(data), validate)
	if err != nil {
		return list, err
	}
	if c.built == nil {
		c.built = map[[sha256.Size]byte]*builtList{}
	}
	if c.built[sum] == nil {
		c.built[sum] = &builtList{list: list}
	}
	return list, nil
}

// fromDeployed answers the parse of the release's old manifest from the
// objects remembered when it was deployed: each only with its kind,
// namespace and name, mapped afresh and given the client the action's own
// parse made for its group and version. It answers only an upgrade that
// applies without reading, before its apply (a rollback afterwards needs
// whole objects), and only a manifest not parsed in this action; it
// declines when a kind no longer maps or has no client yet, and Helm's
// parse then reports what it finds.
func (c *actionClient) fromDeployed(sum [sha256.Size]byte) (kube.ResourceList, bool) {
	if !c.fastApply || c.updated.Load() || c.deployed == nil || c.deployed.sum != sum || c.built[sum] != nil || c.mapper == nil {
		return nil, false
	}
	clients := map[schema.GroupVersion]resource.RESTClient{}
	for _, b := range c.built {
		for _, info := range b.list {
			clients[info.Mapping.GroupVersionKind.GroupVersion()] = info.Client
		}
	}
	list := make(kube.ResourceList, 0, len(c.deployed.ids))
	for _, id := range c.deployed.ids {
		m, err := c.mapper.RESTMapping(id.gvk.GroupKind(), id.gvk.Version)
		if err != nil {
			return nil, false
		}
		cl := clients[id.gvk.GroupVersion()]
		if cl == nil {
			return nil, false
		}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(id.gvk)
		u.SetNamespace(id.namespace)
		u.SetName(id.name)
		list = append(list, &resource.Info{Client: cl, Mapping: m, Namespace: id.namespace, Name: id.name, Object: u})
	}
	// One answer only: the release's old manifest is parsed once.
	c.deployed = nil
	return list, true
}

// objectsOf returns the objects of a manifest this action parsed.
func (c *actionClient) objectsOf(manifest string) (releaseObjects, bool) {
	sum := sha256.Sum256([]byte(manifest))
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.built[sum]
	if b == nil {
		return releaseObjects{}, false
	}
	ro := releaseObjects{sum: sum, ids: make([]objectID, 0, len(b.list))}
	for _, info := range b.list {
		ro.ids = append(ro.ids, objectID{gvk: info.Mapping.GroupVersionKind, namespace: info.Namespace, name: info.Name})
	}
	return ro, true
}

// deployedObjects remembers, per release, the objects of the manifest its
// last successful deployment by this process applied: a few dozen bytes
// per object.
type deployedObjects struct {
	mu        sync.Mutex
	byRelease map[string]*releaseObjects
}

func releaseKey(namespace, name string) string { return namespace + "/" + name }

func (d *deployedObjects) get(key string) *releaseObjects {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.byRelease[key]
}

func (d *deployedObjects) put(key string, ro releaseObjects) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.byRelease == nil {
		d.byRelease = map[string]*releaseObjects{}
	}
	d.byRelease[key] = &ro
}

func (d *deployedObjects) forget(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.byRelease, key)
}
